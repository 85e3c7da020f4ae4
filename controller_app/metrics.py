"""The controller's Prometheus metrics, read from its metadata at each scrape.

``django-prometheus`` gives the HTTP side (requests, latencies, responses by status) through
its middleware; ``MetadataCollector`` adds what the workflows and the periodic
rounds leave in the database, whichever process ran them (the Celery workers count nothing in
the controller's memory): streams by state, scales by state (manual and automatic), retention
truncations, transactions by state, each stream's watermark lag, the age of each worker's and
beat's heartbeat, and the workflow tasks' outcomes (``TaskCount``, counted by the workers).
A handful of grouped queries per scrape, none per stream.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from django.db.models import Count, Max
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from controller_app.models import (
    EpochTransition,
    ProcessHeartbeat,
    Stream,
    TaskCount,
    Transaction,
    TruncationRecord,
    Watermark,
)


def _by(model: Any, field: str) -> dict[str, int]:
    rows = model.objects.values(field).annotate(n=Count("pk")).values_list(field, "n")
    return {str(key): int(n) for key, n in rows}


class MetadataCollector(Collector):
    def describe(self) -> Iterator[Any]:
        """The metric names, without a query (prometheus-client asks at registration)."""
        yield GaugeMetricFamily("millrace_streams", "", labels=["state"])
        yield CounterMetricFamily("millrace_scales", "", labels=["state"])
        yield CounterMetricFamily("millrace_truncations", "")
        yield GaugeMetricFamily("millrace_transactions", "", labels=["state"])
        yield GaugeMetricFamily("millrace_watermark_lag_seconds", "", labels=["stream"])
        yield GaugeMetricFamily("millrace_heartbeat_age_seconds", "", labels=["role", "process"])
        yield CounterMetricFamily("millrace_workflow_tasks", "", labels=["task", "outcome"])

    def collect(self) -> Iterator[Any]:
        streams = GaugeMetricFamily("millrace_streams", "Streams by state.", labels=["state"])
        for state, n in _by(Stream, "state").items():
            streams.add_metric([state], n)
        yield streams
        scales = CounterMetricFamily(
            "millrace_scales", "Scales requested (by hand or by auto-scaling), by state.",
            labels=["state"],
        )  # fmt: skip
        for state, n in _by(EpochTransition, "state").items():
            scales.add_metric([state], n)
        yield scales
        truncations = CounterMetricFamily(
            "millrace_truncations", "Truncations (by hand or by retention)."
        )
        truncations.add_metric([], TruncationRecord.objects.count())
        yield truncations
        txns = GaugeMetricFamily(
            "millrace_transactions", "Transactions not yet completed, by state.", labels=["state"]
        )
        for state, n in _by(Transaction, "state").items():
            txns.add_metric([state], n)
        yield txns
        lag = GaugeMetricFamily(
            "millrace_watermark_lag_seconds",
            "Now less the lower time bound of the stream's newest watermark.",
            labels=["stream"],
        )
        now = time.time()
        newest = (
            Watermark.objects.values("stream__scope__name", "stream__name")
            .annotate(low=Max("low_time"))
            .values_list("stream__scope__name", "stream__name", "low")
        )
        for scope, name, low in newest:
            lag.add_metric([f"{scope}/{name}"], max(0.0, now - low / 1000))
        yield lag
        age = GaugeMetricFamily(
            "millrace_heartbeat_age_seconds",
            "Seconds since each worker's or beat's last heartbeat.",
            labels=["role", "process"],
        )
        at = timezone.now()
        for role, process, beat_at in ProcessHeartbeat.objects.values_list(
            "role", "process", "beat_at"
        ):
            age.add_metric([role, process], (at - beat_at).total_seconds())
        yield age
        tasks = CounterMetricFamily(
            "millrace_workflow_tasks",
            "Workflow task runs by how they ended (ok, retry, failed), counted by the workers.",
            labels=["task", "outcome"],
        )
        for task, outcome, count in TaskCount.objects.values_list("task", "outcome", "count"):
            tasks.add_metric([task, outcome], count)
        yield tasks


_registered: list[MetadataCollector] = []


def register() -> None:
    """Add the collector to prometheus-client's default registry, once per process."""
    if not _registered:
        collector = MetadataCollector()
        REGISTRY.register(collector)
        _registered.append(collector)
