"""The leader: one controller at a time assigns segment containers to segment store nodes.

Responsibility: ``Leader.round`` (every second, from a thread of each controller process,
``LeaderThread``) holds or takes the ``assignment`` lease; while it holds it, it judges which
nodes are live and balances the containers over them:

* **Liveness by observation.** A live node moves its ``Node.renewals`` on every renewal; the
  leader notes, by its own monotonic clock, when it saw each node's count move. A node is live
  while the leader saw its count move within ``session_timeout_s``; gone once it has not for
  that long of the leader's watching; one that left cleanly is gone at once. The leader counts
  only the time it has watched without a break: a new leader, or one whose database calls
  failed, first watches a whole timeout before it calls anyone gone (the nodes it has not seen
  move meanwhile keep their containers and get none), so an outage of the metadata database
  moves no container (the nodes could not renew either) and no clock of another host is
  trusted.
* **Balance with few moves.** Each live node ends with ``floor(C/N)`` or ``ceil(C/N)`` of the C
  containers: a node keeps what it has up to its share, the containers of gone nodes and the
  excess of full ones go to the least loaded. Containers of static nodes (registered by the
  standalone or an operator) are left where they are.
* **Epochs.** Each reassignment takes the next epoch from the lease row (``ClusterLease.epochs``)
  in the same transaction that checks the lease is still this leader's: a leader that lost the
  lease writes nothing, and epochs only grow, whoever leads. Each move is recorded
  (``ContainerMove``) for ``millrace cluster status`` and the console.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from django.db import close_old_connections, connection, transaction
from django.db.models import F
from django.utils import timezone

from controller_app.choices import NodeRole, SessionState
from controller_app.cluster.leases import Lease, now_ms
from controller_app.cluster.membership import ASSIGNMENT_LEASE
from controller_app.models import (
    ClusterLease,
    Container,
    ContainerAssignment,
    ContainerMove,
    Node,
)

__all__ = ["Leader", "LeaderThread", "balance"]

log = logging.getLogger(__name__)


def balance(owners: dict[int, str | None], live: list[str]) -> dict[int, tuple[str | None, str]]:
    """The moves that spread the containers of ``owners`` (container -> node, None: nobody)
    evenly over ``live``, keeping as many where they are as it can: container -> (from, to)."""
    if not live:
        return {}
    held: dict[str, list[int]] = {node: [] for node in live}
    loose: list[int] = []
    for container, owner in sorted(owners.items()):
        held.get(owner, loose).append(container)  # type: ignore[arg-type]
    base, extra = divmod(len(owners), len(live))
    # The fullest nodes keep the extra containers (fewer moves); ties by name.
    order = sorted(live, key=lambda n: (-len(held[n]), n))
    share = {node: base + (1 if i < extra else 0) for i, node in enumerate(order)}
    for node in order:
        while len(held[node]) > share[node]:
            loose.append(held[node].pop())
    moves: dict[int, tuple[str | None, str]] = {}
    for container in sorted(loose):
        node = min(live, key=lambda n: (len(held[n]) - share[n], len(held[n]), n))
        held[node].append(container)
        moves[container] = (owners[container], node)
    return moves


class Leader:
    def __init__(
        self,
        holder: str,
        session_timeout_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        self.lease = Lease(ASSIGNMENT_LEASE, holder, ttl_s=session_timeout_s)
        self.session_timeout_s = session_timeout_s
        self.clock = clock
        #: Called first in each round (the controller renews its own session there); its
        #: failure is a failed round like any other.
        self.heartbeat = heartbeat
        #: node id -> (its renewal count, when this leader saw the count last move)
        self._seen: dict[str, tuple[int, float | None]] = {}
        #: Since when this leader has watched without a break (None: not watching).
        self._watching_since: float | None = None

    def round(self) -> None:
        """Beat, hold the lease; while held, assign. Any error ends the watch (the next round
        starts a new one) and propagates."""
        try:
            if self.heartbeat is not None:
                self.heartbeat()
            if not self.lease.hold():
                self._watching_since = None
                return
            now = self.clock()
            if self._watching_since is None:
                self._watching_since = now
                log.info("leading the cluster (term %d)", self.lease.term)
            self._assign(now)
        except Exception:
            self._watching_since = None
            raise

    def judge_nodes(self, now: float) -> tuple[list[str], set[str]]:
        """The cluster nodes this leader calls live now (it saw their renewals move within a
        session timeout), and those it cannot judge yet (not seen moving, watched for less than
        a timeout): they keep their containers and get none."""
        rows = Node.objects.filter(role=NodeRole.SEGMENT_STORE).exclude(session=SessionState.STATIC)
        live, unsure = [], set()
        assert self._watching_since is not None
        for node_id, renewals, session in rows.values_list("node_id", "renewals", "session"):
            count, moved_at = self._seen.get(node_id, (None, None))
            if count is not None and count != renewals:
                moved_at = now
            self._seen[node_id] = (renewals, moved_at)
            if session != SessionState.LIVE:
                continue
            if moved_at is not None and now - moved_at < self.session_timeout_s:
                live.append(node_id)
            elif now - self._watching_since < self.session_timeout_s:
                unsure.add(node_id)
        return sorted(live), unsure

    def _assign(self, now: float) -> None:
        live, unsure = self.judge_nodes(now)
        rows = ContainerAssignment.objects.select_related("node", "container")
        owners: dict[int, str | None] = {}
        kept = set()
        for row in rows:
            if row.node.session == SessionState.STATIC or row.node.node_id in unsure:
                kept.add(row.container.number)
            else:
                owners[row.container.number] = row.node.node_id
        for number in Container.objects.values_list("number", flat=True):
            if number not in owners and number not in kept:
                owners[number] = None
        moves = balance(owners, live)
        if moves:
            self._apply(moves, gone=set(owners.values()) - set(live) - {None})

    def _apply(self, moves: dict[int, tuple[str | None, str]], gone: set[str | None]) -> None:
        with transaction.atomic():
            lease = ClusterLease.objects.select_for_update().get(name=ASSIGNMENT_LEASE)
            if lease.holder != self.lease.holder or lease.term != self.lease.term:
                return  # no longer the leader: write nothing
            if lease.expires_ms < now_ms():
                return
            targets = {target for _, target in moves.values()}
            nodes = {n.node_id: n for n in Node.objects.filter(node_id__in=targets)}
            epoch = max(
                lease.epochs,
                max(ContainerAssignment.objects.values_list("generation", flat=True), default=0),
            )
            containers = {c.number: c for c in Container.objects.filter(number__in=moves)}
            for number, (source, target) in sorted(moves.items()):
                epoch += 1
                ContainerAssignment.objects.update_or_create(
                    container=containers[number],
                    defaults={"node": nodes[target], "generation": epoch},
                )
                reason = "new" if source is None else ("failover" if source in gone else "balance")
                ContainerMove.objects.create(
                    container=number, from_node=source or "", to_node=target, epoch=epoch,
                    reason=reason,
                )  # fmt: skip
                log.info("container %d: %s -> %s (epoch %d, %s)",
                            number, source or "nobody", target, epoch, reason)  # fmt: skip
            lease.epochs = epoch
            lease.save(update_fields=["epochs"])

    def stop(self) -> None:
        self.lease.release()


#: Between the name of what holds a lease (a controller's node id) and what makes it unique.
HOLDER_SEPARATOR = "#"


def holder_name(node_id: str | None = None) -> str:
    """This process's name as a lease holder: ``node_id`` (the controller's row in the
    cluster's node table; default: the host), then the process id and a random part."""
    return (
        f"{node_id or socket.gethostname()}{HOLDER_SEPARATOR}{os.getpid()}-{uuid.uuid4().hex[:6]}"
    )


def holder_node(holder: str) -> str:
    """The node id (or host) a lease holder's name starts with."""
    return holder.split(HOLDER_SEPARATOR, 1)[0]


class LeaderThread(threading.Thread):
    """A controller's part in the cluster, every ``session_timeout_s / 5`` seconds until
    ``stop``: ``Leader.round``, which first renews the controller's own session (a ``Node`` of
    role controller at its HTTP ``address``)."""

    def __init__(
        self, session_timeout_s: float, address: tuple[str, int], grpc_port: int | None = None
    ) -> None:
        super().__init__(name="millrace-leader", daemon=True)
        self.grpc_port = grpc_port
        self.address = address
        self.node_id = f"controller-{address[0]}:{address[1]}"
        self.leader = Leader(
            holder_name(self.node_id), session_timeout_s, heartbeat=self._renew_own_session
        )
        self.interval_s = session_timeout_s / 5
        self._stop = threading.Event()
        self._failing = False

    def _renew_own_session(self) -> None:
        host, port = self.address
        updated = Node.objects.filter(node_id=self.node_id).update(
            renewals=F("renewals") + 1, last_heartbeat=timezone.now(), session=SessionState.LIVE,
            host=host, port=port, role=NodeRole.CONTROLLER, grpc_port=self.grpc_port,
        )  # fmt: skip
        if not updated:
            Node.objects.create(
                node_id=self.node_id, host=host, port=port, role=NodeRole.CONTROLLER,
                session=SessionState.LIVE, renewals=1, last_heartbeat=timezone.now(),
                started_at=timezone.now(), grpc_port=self.grpc_port,
            )  # fmt: skip

    def run(self) -> None:
        while not self._stop.is_set():
            close_old_connections()
            try:
                self.leader.round()
            except Exception as exc:
                connection.close()
                if not self._failing:
                    log.warning("the leader's round failed (%s: %s); again in %.1f s",
                                type(exc).__name__, exc, self.interval_s)  # fmt: skip
                self._failing = True
            else:
                self._failing = False
            self._stop.wait(self.interval_s)
        with contextlib.suppress(Exception):  # (the lease then expires by itself)
            self.leader.stop()
            Node.objects.filter(node_id=self.node_id).update(session=SessionState.LEFT)
        connection.close()

    def stop(self) -> None:
        self._stop.set()
