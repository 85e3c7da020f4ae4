"""``millrace doctor``'s checks: a node or a cluster as deployed, one finding per line.

Responsibility: look at what breaks a deployment before it fails, from the host the command
runs on, and say each thing in one line (``Finding``: OK, WARN or FAIL, the check's name, what
was seen):

* ``checks_here``: the metadata database's latency; this host's clock against the database's
  (the leader's lease and the nodes' sessions are wall-clock, ADR 0006), and every node's and
  worker's or beat's clock as their last renewal shows it; the broker's latency; the TLS
  certificate's end; the token secret's age; reader groups in STALL, STOP or ERR;
* ``checks_of(url)``: the node's health tree (each part that is DOWN, the tiers and the disk)
  and every process that ``/v1/metrics/targets`` lists: its ``/ready`` (containers not
  running, a worker without its broker) and the version its ``/metrics`` says.

A check that cannot run is a FAIL naming why; no check stops the others.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from controller_app.choices import SessionState
from controller_app.models import Node, ProcessHeartbeat, ReaderGroupLag
from millrace.kernel.status_files import HEARTBEAT_INTERVAL_SECONDS, HEARTBEAT_STALE_SECONDS

OK, WARN, FAIL = "OK", "WARN", "FAIL"
#: A clock this far from the database's is worth a warning (seconds).
SKEW_WARN_SECONDS = 1.0
#: A certificate ending within this many days is a warning.
CERTIFICATE_WARN_DAYS = 14
#: A token secret older than this many days is worth rotating.
SECRET_WARN_DAYS = 365
#: Seconds each remote question may take.
ASK_TIMEOUT_SECONDS = 3.0


@dataclass(frozen=True)
class Finding:
    status: str
    check: str
    message: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.check}: {self.message}"


def _now() -> float:
    """This host's clock (``MILLRACE_TEST_CLOCK_OFFSET_S`` moves it, for the tests only)."""
    return time.time() + float(os.environ.get("MILLRACE_TEST_CLOCK_OFFSET_S") or 0)


def _safely(check: str, run: Callable[[], list[Finding]]) -> list[Finding]:
    try:
        return run()
    except Exception as exc:  # a check that cannot run says why; the others go on
        return [Finding(FAIL, check, f"could not check: {type(exc).__name__}: {exc}")]


# -- here: the database, clocks, the broker, secrets -------------------------------------------


def _database_now() -> float:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())")
        elif connection.vendor == "sqlite":
            cursor.execute("SELECT (julianday('now') - 2440587.5) * 86400.0")
        else:
            cursor.execute("SELECT UNIX_TIMESTAMP(NOW(6))")
        return float(cursor.fetchone()[0])


def database() -> list[Finding]:
    try:
        took = []
        for _ in range(5):
            started = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            took.append(time.perf_counter() - started)
    except DatabaseError as exc:
        return [Finding(FAIL, "database", f"{connection.vendor} does not answer: {exc}")]
    median = statistics.median(took) * 1000
    status = OK if median < 50 else WARN
    return [Finding(status, "database", f"{connection.vendor} answers in {median:.1f} ms")]


def clocks() -> list[Finding]:
    """This host's clock, then each node's and process's, against the database's."""
    timeout = float(settings.MILLRACE.session_timeout_s)
    asked = time.time()
    theirs = _database_now()
    rtt = time.time() - asked
    skew = _now() - rtt / 2 - theirs
    status = OK if abs(skew) < SKEW_WARN_SECONDS else WARN if abs(skew) < timeout / 2 else FAIL
    found = [Finding(status, "clock", (
        f"this host's clock is {abs(skew):.1f} s {'ahead of' if skew > 0 else 'behind'} the"
        f" database's (the session timeout is {timeout:g} s)"
    ))]  # fmt: skip
    now = timezone.now()
    renewals: list[tuple[str, Any, float]] = [
        (f"node {node_id}", at, timeout / 5)
        for node_id, at in Node.objects.filter(session=SessionState.LIVE).values_list(
            "node_id", "last_heartbeat"
        )
    ] + [
        (f"{role} {process}", at, HEARTBEAT_INTERVAL_SECONDS)
        for role, process, at in ProcessHeartbeat.objects.values_list("role", "process", "beat_at")
    ]  # fmt: skip
    for who, at, interval in renewals:
        if at is None or (now - at).total_seconds() > HEARTBEAT_STALE_SECONDS * 6:
            continue  # gone long ago (its role's check says so)
        offset = (at - now).total_seconds() + (theirs - time.time())  # its clock less the db's
        if offset > SKEW_WARN_SECONDS or offset < -(interval + HEARTBEAT_STALE_SECONDS):
            status = WARN if abs(offset) < timeout / 2 else FAIL
            found.append(Finding(status, "clock", (
                f"{who} renewed {abs(offset):.1f} s {'ahead of' if offset > 0 else 'behind'} the"
                " database's clock (its clock differs, or it is stuck)"
            )))  # fmt: skip
    return found


def broker() -> list[Finding]:
    from controller_app.operations.health import broker_health

    started = time.perf_counter()
    found = broker_health()
    took = (time.perf_counter() - started) * 1000
    transport = found.details.get("transport")
    if found.status != "UP":
        return [Finding(FAIL, "broker", f"{transport} refuses: {found.details.get('error')}")]
    return [Finding(OK if took < 100 else WARN, "broker", f"{transport} answers in {took:.1f} ms")]


def certificate() -> list[Finding]:
    from millrace.kernel.metrics_port import certificate_end

    tls = settings.MILLRACE_TLS
    if not tls.enabled or not tls.cert_file:
        return [Finding(OK, "certificate", "TLS is off (MILLRACE_TLS_ENABLED)")]
    end = certificate_end(tls.cert_file)
    if end is None:
        return [Finding(FAIL, "certificate", f"{tls.cert_file} does not load")]
    days = (end - _now()) / 86400
    status = FAIL if days <= 0 else WARN if days < CERTIFICATE_WARN_DAYS else OK
    said = "ended" if days <= 0 else f"ends in {days:.0f} days"
    return [Finding(status, "certificate", f"{tls.cert_file} {said}")]


def token_secret() -> list[Finding]:
    node = settings.MILLRACE
    if not node.auth_enabled:
        return [Finding(WARN, "token secret", "authentication is off (MILLRACE_AUTH)")]
    persisted = (
        None
        if os.environ.get("MILLRACE_TOKEN_SECRET")
        else (Path(node.data_dir) / "secrets" / "token-secret")
    )
    candidates = [node.token_keyring, persisted]
    found = [path for path in candidates if path is not None and Path(path).exists()]
    if not found:
        return [Finding(OK, "token secret", "from MILLRACE_TOKEN_SECRET (its age is not known)")]
    days = (_now() - Path(found[0]).stat().st_mtime) / 86400
    status = WARN if days > SECRET_WARN_DAYS else OK
    hint = " (rotate it: millrace token secret rotate)" if status == WARN else ""
    return [Finding(status, "token secret", f"{found[0]} set {days:.0f} days ago{hint}")]


def reader_groups() -> list[Finding]:
    rows = ReaderGroupLag.objects.exclude(status="OK").select_related("group__scope")
    found = [
        Finding(
            FAIL if row.status == "ERR" else WARN,
            "reader group",
            f"{row.group.scope.name}/{row.group.name} is {row.status}:"
            f" {row.report.get('reason', '')}",
        )
        for row in rows.order_by("group__scope__name", "group__name")
    ]
    return found or [Finding(OK, "reader groups", "every measured group is OK")]


def checks_here() -> Iterator[Finding]:
    for name, check in (("database", database), ("clock", clocks), ("broker", broker),
                        ("certificate", certificate), ("token secret", token_secret),
                        ("reader groups", reader_groups)):  # fmt: skip
        yield from _safely(name, check)


# -- there: the node's health and every process's own answer ----------------------------------


def _health(get: Callable[..., Any], url: str) -> list[Finding]:
    answer = get(f"{url}/health")
    tree = answer.json()
    children = tree.get("children") or {}
    found = [
        Finding(FAIL, name, f"DOWN: {_details(child)}")
        for name, child in children.items()
        if child.get("status") == "DOWN"
    ]
    disk = ((children.get("tiers") or {}).get("details") or {}).get("disk")
    if disk and not any(f.check == "tiers" for f in found):
        found.append(Finding(OK, "disk", str(disk)))
    up = [name for name, child in children.items() if child.get("status") != "DOWN"]
    return [*found, Finding(OK, "health", f"up: {', '.join(up)}")]


def _details(child: dict[str, Any]) -> str:
    details = child.get("details") or {}
    shown = [f"{key} {value}" for key, value in details.items() if key != "down"]
    return "; ".join(shown)[:300] or "no details"


def _processes(get: Callable[..., Any], url: str, token: str, scrape: str) -> list[Finding]:
    targets = get(f"{url}/v1/metrics/targets", headers={"Authorization": f"Token {token}"})
    targets.raise_for_status()
    from millrace.kernel.metrics_port import version

    found, versions = [], {}
    for group in targets.json():
        labels = group["labels"]
        (address,) = group["targets"]
        who = f"{labels['role']} {labels.get('node') or labels.get('process')}"
        base = f"{labels['__scheme__']}://{address}"
        try:
            ready = get(f"{base}/ready").json()
            metrics = get(f"{base}/metrics", headers={"Authorization": f"Bearer {scrape}"}).text
        except Exception as exc:
            found.append(Finding(FAIL, "process", f"{who} at {address} does not answer: {exc}"))
            continue
        status = OK if ready.get("ready") else FAIL
        found.append(Finding(status, "process", f"{who}: {ready.get('reason')}"))
        for line in metrics.splitlines():
            if line.startswith("millrace_build_info{"):
                versions[who] = line.split('version="', 1)[1].split('"', 1)[0]
    mine = version()
    differ = {who: v for who, v in versions.items() if v != mine}
    if differ:
        shown = ", ".join(f"{who} {v}" for who, v in sorted(differ.items()))
        found.append(Finding(WARN, "versions", f"this host runs {mine}; {shown}"))
    else:
        found.append(Finding(OK, "versions", f"{len(versions)} processes run {mine}"))
    return found


def checks_of(url: str, token: str, verify: Any) -> Iterator[Finding]:
    """What the node or cluster at ``url`` says of itself (``token``: an API token)."""
    import httpx

    from controller_app.access.tokens import delegation_token
    from millrace.kernel.claims import READ

    def get(address: str, **options: Any) -> Any:
        return httpx.get(address, timeout=ASK_TIMEOUT_SECONDS, verify=verify, **options)

    scrape = delegation_token("*", READ, ttl_seconds=60)
    yield from _safely("health", lambda: _health(get, url))
    yield from _safely("process", lambda: _processes(get, url, token, scrape))


__all__ = ["FAIL", "OK", "WARN", "Finding", "checks_here", "checks_of"]
