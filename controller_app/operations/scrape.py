"""Where Prometheus finds every process of a cluster: the target groups of its HTTP service
discovery (``GET /v1/metrics/targets``).

Responsibility: one group per process, labelled ``role`` (``controller``, ``segmentstore``,
``worker``, ``beat``) and ``node`` or ``process``: the live controllers a cluster registers
(or, on a standalone, the address the request came to), the segment store nodes with a
metrics port that have not left, and the workers and beats whose heartbeat carries a
metrics port and is under ``TARGET_HEARTBEAT_SECONDS`` old. A process killed for good
leaves the list that long after; its role's heartbeat age on the controller's ``/metrics``
still says it is down.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone

from controller_app.choices import NodeRole, SessionState
from controller_app.models import Node, ProcessHeartbeat
from controller_app.selectors import segment_store_nodes

#: Workers and beats are targets while their heartbeat is younger than this.
TARGET_HEARTBEAT_SECONDS = 60.0


def _group(address: str, scheme: str, **labels: str) -> dict[str, Any]:
    return {
        "targets": [address],
        "labels": {**labels, "__scheme__": scheme, "__metrics_path__": "/metrics"},
    }


def scrape_targets(own_address: str, scheme: str) -> list[dict[str, Any]]:
    """The target groups, controllers first (3 queries)."""
    controllers = Node.objects.filter(role=NodeRole.CONTROLLER, session=SessionState.LIVE)
    found = [
        _group(f"{host}:{port}", scheme, role="controller", node=node_id)
        for node_id, host, port in controllers.order_by("node_id").values_list(
            "node_id", "host", "port"
        )
    ] or [_group(own_address, scheme, role="controller", node=own_address)]
    stores = segment_store_nodes().filter(metrics_port__isnull=False).order_by("node_id")
    for node_id, host, port, tls in stores.values_list("node_id", "host", "metrics_port", "tls"):
        found.append(_group(f"{host}:{port}", "https" if tls else scheme,
                            role="segmentstore", node=node_id))  # fmt: skip
    since = timezone.now() - dt.timedelta(seconds=TARGET_HEARTBEAT_SECONDS)
    processes = ProcessHeartbeat.objects.filter(beat_at__gte=since).exclude(metrics_address="")
    for role, process, address in processes.order_by("role", "process").values_list(
        "role", "process", "metrics_address"
    ):
        found.append(_group(address, scheme, role=role, process=process))
    return found
