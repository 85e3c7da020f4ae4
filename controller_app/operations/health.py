"""The node's health tree: one contributor per part, each saying whether it is up and why not.

Responsibility: answer "can this node take writes, and if not, which part is down?" within
``HEALTH_TIMEOUT_SECONDS``, in Pravega's HealthResult shape (``name``, ``status``,
``readiness``, ``liveness``, ``details``, ``children``). Contributors:

* ``database``: the metadata database answers ``SELECT 1``.
* ``segmentstore``: every registered segment store node answers a wire-level keep-alive
  (``millrace.client.transport.probe``) on its client port within ``PROBE_TIMEOUT_SECONDS``; on
  the same host its status file adds its containers with their states and epochs.
* ``tiers``: what the segment store reports of tier-1 (a container stopped by a tier-1 failure)
  and tier-2 (failing flushes: data waits in tier-1, acknowledgements go on), naming the tier.
* ``worker`` and ``beat``: the newest heartbeat of a Celery worker (or of beat's tick) is
  younger than ``HEARTBEAT_STALE_SECONDS`` (``millrace.kernel.status_files``).
* ``broker``: the Celery broker accepts a connection (Redis, or the filesystem broker's
  folders).
* ``grpc``: this controller's gRPC endpoint for Pravega's clients serves (its address), or
  why it could not start; absent when it is off (``--grpc-port 0``).

Under ``millrace standalone`` the supervisor's state file adds each child's state, restart
count and last exit to its contributor, so a child waiting to be restarted is reported down at
once with the reason. The node is ``DOWN`` when any contributor is; it is not *ready* (HTTP 503
on readiness) only when a part that appends need is down (``WRITE_PATH``): the segment store
or tier-1. The metadata database is not one: writers that have their segments go on appending
while it is away (new writers, REST calls and reader-group syncs wait for it: 503). The
segment store's contributor is the node's own answer (its keep-alive and status file), found
through the database's node registry, or through this host's status files while the database
is away. Liveness is answering at all.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime as dt
import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import celery
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import Count
from django.utils import timezone

from controller_app import selectors as sel
from controller_app.choices import SessionState
from controller_app.operations import heartbeats
from millrace.client.transport.probe import ProbeError, probe_segment_store
from millrace.kernel import status_files
from millrace.kernel.status_files import (
    node_status_path,
    node_status_paths,
    read_fresh,
    supervisor_state_path,
)
from millrace.kernel.tls import peer_context

#: The longest a health request takes: a contributor that has not answered by then is down.
HEALTH_TIMEOUT_SECONDS = 3.0
#: How long a segment store node has to answer the wire keep-alive.
PROBE_TIMEOUT_SECONDS = 1.0
#: A status file (the segment store's, the supervisor's) older than this is not believed.
STATUS_FRESH_SECONDS = 5.0
#: Contributors that appends need: one of them down makes the node not ready.
WRITE_PATH = frozenset({"segmentstore", "tiers"})

UP, DOWN, UNKNOWN = "UP", "DOWN", "UNKNOWN"


@dataclasses.dataclass(frozen=True)
class Health:
    """One node of the health tree (Pravega's HealthResult)."""

    name: str
    status: str  # UP, STARTING, NEW, UNKNOWN, FAILED or DOWN
    readiness: bool
    liveness: bool
    details: dict[str, str] = dataclasses.field(default_factory=dict)
    children: dict[str, Health] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, name: str, up: bool, details: dict[str, str], **kw: Any) -> Health:
        return cls(name, UP if up else DOWN, up, True, details, **kw)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "readiness": self.readiness,
            "liveness": self.liveness,
            "details": self.details,
            "children": {name: child.as_json() for name, child in self.children.items()},
        }


# -- the state files of the same host ---------------------------------------------------------


def supervised() -> dict[str, Any]:
    """The standalone supervisor's children (name → state), or {} when not under one."""
    found = read_fresh(supervisor_state_path(settings.MILLRACE.data_dir), STATUS_FRESH_SECONDS)
    return found.get("children", {}) if found else {}


def _with_supervisor(details: dict[str, str], child: dict[str, Any] | None) -> bool:
    """Adds the supervisor's view of a child to ``details``; False unless it is ready (a child
    being restarted is down, even while its last heartbeat is still fresh)."""
    if not child:
        return True
    details["process"] = f"{child['state']} (pid {child['pid']})"
    details["restarts"] = str(child["restarts"])
    if child.get("reason"):
        details["lastExit"] = child["reason"]
    return bool(child["state"] == "ready")


# -- contributors -------------------------------------------------------------------------------


def database_health() -> Health:
    """UP when the metadata database answers ``SELECT 1``."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:  # the message may name hosts: keep it out of a public answer
        return Health("database", DOWN, False, False, {"error": type(exc).__name__})
    return Health("database", UP, True, True, {"vendor": connection.vendor})


def _probe(address: tuple[str, int]) -> str | None:
    """None when the node at ``address`` answers the keep-alive, else why not."""
    try:
        probe_segment_store(
            *address, timeout=PROBE_TIMEOUT_SECONDS, tls=peer_context(settings.MILLRACE_TLS)
        )
    except ProbeError as exc:
        return str(exc)
    return None


def _nodes() -> list[tuple[str, int]]:
    """The registered segment store nodes; while the database is away, the nodes of this
    host that report themselves (their status files): a node's health is its own, never the
    database's."""
    try:
        fresh = timezone.now() - dt.timedelta(seconds=settings.MILLRACE.session_timeout_s)
        rows = sel.segment_store_nodes().annotate(held=Count("assignments")).order_by("node_id")
        # A cluster node gone for good (its session expired, its containers moved) is history,
        # not a part that is down; one that still holds containers is checked.
        return [
            (node.host, node.port) for node in rows
            if node.session == SessionState.STATIC or node.held
            or (node.last_heartbeat is not None and node.last_heartbeat > fresh)
        ]  # fmt: skip
    except DatabaseError:
        return _local_nodes()


def _local_nodes() -> list[tuple[str, int]]:
    found = []
    for path in node_status_paths(settings.MILLRACE.data_dir):
        report = read_fresh(path, STATUS_FRESH_SECONDS)
        if report is not None and isinstance(report.get("address"), list):
            host, port = report["address"]
            found.append((str(host), int(port)))
    return found


def segment_store_health(
    nodes: list[tuple[str, int]],
    probes: dict[tuple[str, int], str | None],
    reports: dict[tuple[str, int], dict[str, Any]],
    child: dict[str, Any] | None,
) -> Health:
    """Every registered node answers its keep-alive and runs all its containers."""
    details: dict[str, str] = {}
    up = _with_supervisor(details, child) and bool(nodes)
    if not nodes:
        details["error"] = "no segment store node is registered"
    for address in nodes:
        where = f"{address[0]}:{address[1]}"
        failure = probes.get(address, f"no answer within {HEALTH_TIMEOUT_SECONDS:g} s")
        details[where] = "answers" if failure is None else f"DOWN: {failure}"
        up = up and failure is None
        for number, container in (reports.get(address) or {}).get("containers", {}).items():
            if container["state"] == "not assigned":  # a cluster node's: another node's now
                continue
            running = container["state"] == "running"
            details[f"container {number}"] = f"{container['state']}, epoch {container['epoch']}"
            up = up and running
    return Health.of("segmentstore", up, details)


def tier_health(reports: dict[tuple[str, int], dict[str, Any]]) -> Health:
    """Tier-1 and tier-2 as the segment store nodes of this host report them."""
    if not reports:
        details = {"error": "no fresh report from a segment store on this host"}
        return Health("tiers", UNKNOWN, True, True, details)
    children = {}
    for tier in ("tier1", "tier2"):
        details, up = {}, True
        for address, report in reports.items():
            if "stale" in report:
                details[f"{address[0]}:{address[1]}"] = (
                    f"no fresh report for {report['stale']:.0f} s (a full disk, or the node hangs)"
                )
                up = False
                continue
            details["backend"] = str(report.get(tier))
            if tier == "tier1" and not _disk_ok(report.get("disk"), details):
                up = False
            for number, container in report.get("containers", {}).items():
                error = container.get(f"{tier}_error")
                if tier == "tier1" and container["state"] == "failed" and not error:
                    error = "container failed"
                if error:
                    details[f"container {number}"] = error
                    up = False
        children[tier] = Health.of(tier, up, details)
    up = all(child.status == UP for child in children.values())
    down = [name for name, child in children.items() if child.status != UP]
    details = {"down": ", ".join(down)} if down else {}
    ready = children["tier1"].readiness  # tier-2 trouble delays flushing, not writes
    return Health("tiers", UP if up else DOWN, ready, True, details, children)


def _disk_ok(disk: dict[str, Any] | None, details: dict[str, str]) -> bool:
    """Adds the data directory's disk to ``details``; False while appends are refused for it."""
    if not disk:
        return True
    if "error" in disk:
        details["disk"] = f"{disk['path']}: {disk['error']}"
        return True
    details["disk"] = (
        f"{disk['path']}: {disk['usedPercent']}% full, {disk['freeBytes'] // 2**20} MiB free"
        f" (the limit is {disk['limitPercent']}%)"
    )
    if disk["refusing"]:
        details["disk"] = "DOWN: appends refused, " + details["disk"]
    return not disk["refusing"]


def heartbeat_health(role: str, child: dict[str, Any] | None) -> Health:
    """The newest heartbeat of ``role`` (worker or beat) is fresh: its row in the database,
    or, while the database is away, its file on this host (so that an outage of the database
    does not make live processes look dead)."""
    details: dict[str, str] = {}
    up = _with_supervisor(details, child)
    try:
        latest = heartbeats.latest(role)
    except DatabaseError as exc:
        age = heartbeats.local_age_seconds(role)
        if age is None:
            details["error"] = f"cannot read heartbeats: {type(exc).__name__}"
            return Health.of(role, False, details)
        details["lastHeartbeat"] = f"{age:.1f} s ago (this host's file)"
        return Health.of(role, up and age < status_files.HEARTBEAT_STALE_SECONDS, details)
    if latest is None:
        details["lastHeartbeat"] = "never"
        return Health.of(role, False, details)
    age = heartbeats.age_seconds(latest)
    details["lastHeartbeat"] = f"{age:.1f} s ago ({latest.process})"
    return Health.of(role, up and age < status_files.HEARTBEAT_STALE_SECONDS, details)


def broker_health() -> Health:
    """The Celery broker accepts a connection."""
    # The project's Celery app: the current one once Django is set up (controller_app's
    # ``ready`` binds it), as for every task this process sends.
    app = celery.current_app
    transport = settings.CELERY_BROKER_URL.split("://")[0]
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=PROBE_TIMEOUT_SECONDS)  # type: ignore[arg-type]
            with conn.channel():
                pass
    except Exception as exc:  # kombu and its transports raise many kinds
        return Health.of("broker", False, {"transport": transport, "error": type(exc).__name__})
    return Health.of("broker", True, {"transport": transport})


# -- the tree -------------------------------------------------------------------------------------

_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="health")


def _gather(calls: dict[Any, Callable[[], Any]], timeout: float) -> dict[Any, tuple[bool, Any]]:
    """Runs ``calls`` at once; (finished, result) of each within ``timeout`` seconds."""
    futures = {key: _POOL.submit(call) for key, call in calls.items()}
    concurrent.futures.wait(futures.values(), timeout=timeout)
    return {
        key: (future.done(), future.result() if future.done() else None)
        for key, future in futures.items()
    }


def contributors() -> list[Health]:
    """Every contributor's health, within ``HEALTH_TIMEOUT_SECONDS``."""
    started = time.monotonic()
    database = database_health()
    if "no-health-contributors" in settings.MILLRACE.unsafe:  # TEST-ONLY: the old, blind check
        return [database]
    children = supervised()
    nodes = _nodes()
    calls: dict[Any, Callable[[], Any]] = {
        address: functools.partial(_probe, address) for address in nodes
    }
    calls["broker"] = broker_health
    left = HEALTH_TIMEOUT_SECONDS - (time.monotonic() - started) - 0.2
    answers = _gather(calls, max(left, 0.1))
    probes = {address: answers[address][1] for address in nodes if answers[address][0]}
    reports = {}
    for address in nodes:
        path = node_status_path(settings.MILLRACE.data_dir, address[1])
        found = read_fresh(path, STATUS_FRESH_SECONDS)
        if found is not None and _pid_alive(found.get("pid")):
            reports[address] = found
        elif path.exists():  # a node of this host that no longer reports: never believed UP
            reports[address] = {"stale": _age(path)}
    done, broker = answers["broker"]
    parts = [
        database,
        segment_store_health(nodes, probes, reports, children.get("segmentstore")),
        tier_health(reports),
        heartbeat_health("worker", children.get("worker")),
        heartbeat_health("beat", children.get("beat")),
        broker if done else Health.of("broker", False, {"error": "no answer in time"}),
    ]
    grpc = grpc_health()
    return parts if grpc is None else [*parts, grpc]


def grpc_health() -> Health | None:
    """This process's gRPC endpoint (``controller_app.grpc.server``), if it has one."""
    try:
        from controller_app.grpc.server import serving
    except ImportError:  # grpcio missing: the endpoint cannot have started either
        return None
    state = serving()
    if state["address"] is not None:
        host, port = state["address"]
        scheme = "tls" if state["tls"] else "tcp"
        return Health.of("grpc", True, {"endpoint": f"{scheme}://{host}:{port}"})
    if state["error"] is not None:
        return Health.of("grpc", False, {"error": state["error"]})
    return None


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return float("inf")


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, 0)
        return True
    return False


def node_health() -> Health:
    """The node and its contributors: DOWN when any is down, ready while writes can go on."""
    children = {health.name: health for health in contributors()}
    down = [name for name, child in children.items() if child.status == DOWN]
    ready = all(children[name].readiness for name in WRITE_PATH if name in children)
    details = {"down": ", ".join(down)} if down else {}
    return Health("millrace", DOWN if down else UP, ready, True, details, children)
