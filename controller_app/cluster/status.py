"""What an operator is shown of the cluster: nodes, their sessions, containers, the leader, moves.

Responsibility: ``cluster_status()`` reads the host store in a fixed number of queries and
answers plain data for ``GET /v1/cluster``, ``millrace cluster status`` and the console's
cluster page: every node (role, address, session state, seconds since its last renewal, whether
that is within the session timeout, its containers), the leader (the assignment lease's holder,
term and time left), and the latest container moves; ``moves_over_time`` turns the moves into
the containers each node held after each move, for the console's chart.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import timezone

from controller_app.choices import NodeRole, SessionState
from controller_app.cluster.leader import holder_node
from controller_app.cluster.leases import now_ms
from controller_app.cluster.membership import ASSIGNMENT_LEASE
from controller_app.models import ClusterLease, ContainerAssignment, ContainerMove, Node

__all__ = ["MOVES_SHOWN", "cluster_status", "moves_over_time"]

#: The latest moves shown.
MOVES_SHOWN = 50


def _session_timeout_s() -> int:
    return int(settings.MILLRACE.session_timeout_s)


def cluster_status() -> dict[str, Any]:
    """The cluster as plain data (4 queries)."""
    now = timezone.now()
    timeout = _session_timeout_s()
    held: dict[str, list[int]] = {}
    epochs: dict[int, int] = {}
    for number, node_id, epoch in ContainerAssignment.objects.values_list(
        "container__number", "node__node_id", "generation"
    ):
        held.setdefault(node_id, []).append(number)
        epochs[number] = epoch
    nodes = []
    for node in Node.objects.order_by("role", "node_id"):
        age = None if node.last_heartbeat is None else (now - node.last_heartbeat).total_seconds()
        nodes.append({
            "nodeId": node.node_id,
            "role": NodeRole(node.role).label,
            "host": node.host,
            "port": node.port,
            "tls": node.tls,
            "address": node.address,
            "metricsPort": node.metrics_port,
            "grpcPort": node.grpc_port,
            "session": node.session,
            "sessionAgeSeconds": None if age is None else round(age, 1),
            "live": node.session == SessionState.STATIC
            or (node.session == SessionState.LIVE and age is not None and age < timeout),
            "containers": sorted(held.get(node.node_id, [])),
        })  # fmt: skip
    lease = ClusterLease.objects.filter(name=ASSIGNMENT_LEASE).first()
    leader = None
    if lease is not None and lease.holder and lease.expires_ms > now_ms():
        leader = {"holder": lease.holder, "node": holder_node(lease.holder), "term": lease.term,
                  "expiresInMs": lease.expires_ms - now_ms()}  # fmt: skip
    moves = [
        {"container": m.container, "from": m.from_node or None, "to": m.to_node,
         "epoch": m.epoch, "reason": m.reason, "at": m.at.isoformat()}
        for m in ContainerMove.objects.all()[:MOVES_SHOWN]
    ]  # fmt: skip
    return {
        "sessionTimeoutSeconds": timeout,
        "leader": leader,
        "containerCount": len(epochs),
        "assignmentEpochs": {str(k): v for k, v in sorted(epochs.items())},
        "nodes": nodes,
        "moves": moves,
    }


def moves_over_time(status: dict[str, Any]) -> tuple[list[str], dict[str, list[int]]]:
    """From ``status``'s moves (newest first) back to the oldest shown: the times, and for each
    segment store node the containers it held after each move (its count now at the end)."""
    counts = {n["nodeId"]: len(n["containers"]) for n in status["nodes"]
              if n["role"] != NodeRole.CONTROLLER.label}  # fmt: skip
    times: list[str] = []
    series: dict[str, list[int]] = {node: [] for node in counts}
    for move in status["moves"]:  # newest first: undo each move to get the state before it
        times.append(move["at"])
        for node, count in counts.items():
            series[node].append(count)
        counts[move["to"]] = counts.get(move["to"], 0) - 1
        if move["from"]:
            counts[move["from"]] = counts.get(move["from"], 0) + 1
    return times[::-1], {node: values[::-1] for node, values in series.items()}
