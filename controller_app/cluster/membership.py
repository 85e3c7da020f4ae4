"""Segment store nodes' sessions in the metadata database (``segment_app.server.membership``'s
``Membership``, implemented over Django models).

Responsibility: ``DatabaseMembership`` registers a node when it starts (``join``: its id, the
address clients reach it at, its metrics port, the cluster's container count, which must not
change), renews its session (``renew``: one UPDATE that moves ``Node.renewals`` on, and one
query for the containers assigned to it with their epochs), and closes it on a clean stop
(``leave``). A renewal of a node the database does not know (its row deleted) joins it again.
Every call runs in a thread of the node's: a connection that failed is closed, so the next call
opens a fresh one once the database is back.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import close_old_connections, connection, transaction
from django.db.models import F
from django.utils import timezone

from controller_app import selectors as sel
from controller_app.choices import NodeRole, SessionState
from controller_app.models import ClusterLease, Container, ContainerAssignment, Node
from millrace.kernel.membership import NodeCard

__all__ = ["DatabaseMembership", "check_container_count", "register_node"]

T = TypeVar("T")

#: The lease whose holder assigns containers; its row also keeps the last epoch given.
ASSIGNMENT_LEASE = "assignment"


def _fresh_connection(fn: Callable[..., T]) -> Callable[..., T]:
    """Run ``fn`` on a usable connection; on an error, drop the connection and re-raise."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        own = not connection.in_atomic_block  # (inside a caller's transaction: its connection)
        if own:
            close_old_connections()
        try:
            return fn(*args, **kwargs)
        except Exception:
            if own:
                connection.close()
            raise

    return run


def check_container_count(count: int) -> None:
    """Refuse a node whose container count differs from the cluster's (segments would move)."""
    known = sel.container_count()
    if known and known != count:
        raise ValueError(
            f"this cluster has {known} segment containers; the node offers {count} "
            "(MILLRACE_CONTAINERS must stay the same for the life of a cluster)"
        )


class DatabaseMembership:
    @_fresh_connection
    def join(self, card: NodeCard) -> None:
        check_container_count(card.container_count)
        now = timezone.now()
        with transaction.atomic():
            ClusterLease.objects.get_or_create(name=ASSIGNMENT_LEASE)
            for number in range(card.container_count):
                Container.objects.get_or_create(number=number)
            node, _ = Node.objects.get_or_create(
                node_id=card.node_id,
                defaults={"host": card.host, "port": card.port, "role": NodeRole.SEGMENT_STORE},
            )
            node.host, node.port, node.metrics_port = card.host, card.port, card.metrics_port
            node.tls = card.tls
            node.role, node.session = NodeRole.SEGMENT_STORE, SessionState.LIVE
            node.started_at = node.last_heartbeat = now
            node.renewals += 1
            node.save()

    @_fresh_connection
    def renew(self, node_id: str) -> dict[int, int]:
        renewed = Node.objects.filter(node_id=node_id).update(
            renewals=F("renewals") + 1, last_heartbeat=timezone.now(), session=SessionState.LIVE
        )
        if not renewed:
            raise LookupError(f"node {node_id} is not registered (deleted?): it joins again")
        rows = ContainerAssignment.objects.filter(node__node_id=node_id).values_list(
            "container__number", "generation"
        )
        return dict(rows)

    @_fresh_connection
    def leave(self, node_id: str) -> None:
        Node.objects.filter(node_id=node_id).update(session=SessionState.LEFT)


def register_node(
    *,
    host: str,
    port: int,
    container_count: int,
    node_id: str = "standalone",
    metrics_port: int | None = None,
    tls: bool = False,
) -> Node:
    """Record the node ``node_id`` at ``host:port`` (``tls``: its ports need TLS) and assign it
    every container.

    The container count is fixed for the life of a cluster; a different count from the one
    registered before is refused (segments would move to other containers).
    """
    check_container_count(container_count)
    with transaction.atomic():
        node, _ = Node.objects.update_or_create(
            node_id=node_id,
            defaults={"host": host, "port": port, "metrics_port": metrics_port, "tls": tls},
        )
        for number in range(container_count):
            container, _ = Container.objects.get_or_create(number=number)
            assignment = ContainerAssignment.objects.filter(container=container).first()
            if assignment is None:
                ContainerAssignment.objects.create(container=container, node=node)
            elif assignment.node_id != node.pk:
                assignment.node = node
                assignment.generation += 1
                assignment.save(update_fields=["node", "generation", "assigned_at"])
    return node
