"""The metrics port of a Celery worker or beat process: ``/live``, ``/ready`` and ``/metrics``
(``millrace.kernel.metrics_port``), so that each process answers for itself.

Responsibility: what a worker and beat know of themselves. The port listens on
``MILLRACE_METRICS_HOST`` and ``MILLRACE_WORKER_METRICS_PORT`` or ``MILLRACE_BEAT_METRICS_PORT``
(0, the default: any free port). Its address goes with the process's heartbeat (its row and
its file), where the controller's scrape targets (``GET /v1/metrics/targets``) find it.

* **live** while the process's heartbeat runs: the worker's heartbeat thread, beat's tick
  (stale after ``HEARTBEAT_STALE_SECONDS``);
* **ready**, a worker: live, and its consumer runs with a connection to the broker, so it takes
  tasks. Beat: live. A standby beat (another holds the ``beat`` lease) is ready too: it takes
  over when the holder stops;
* **metrics**: the process's own (CPU, memory, descriptors), its heartbeat's age and what only
  it knows: a worker's broker connection, the tasks it has received and is running; beat's
  hold of the lease.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from millrace.kernel.metrics_port import (
    Answer,
    BuildInfo,
    CertificateEnd,
    MetricsPort,
    PortApp,
    fresh,
)
from millrace.kernel.status_files import HEARTBEAT_STALE_SECONDS

log = logging.getLogger(__name__)

#: What a worker or beat process tells its port. One per process (a process has one role).
state: dict[str, Any] = {"beat_at": None, "consumer": None, "lease": None}
#: Tasks the worker's consumer received, by name (its pool runs them in child processes).
received: Counter[str] = Counter()
#: The port, once started (its address goes with the heartbeat).
_port: list[MetricsPort] = []


def address() -> str:
    """``host:port`` of this process's metrics port, or ``""`` before it started."""
    return f"{settings.MILLRACE.metrics_host}:{_port[0].port}" if _port else ""


def beating() -> None:
    """The process's heartbeat ran now."""
    state["beat_at"] = time.monotonic()


def live() -> Answer:
    return fresh(state["beat_at"], HEARTBEAT_STALE_SECONDS, "the heartbeat ran")


def worker_ready() -> Answer:
    from celery import bootsteps

    alive, why = live()
    consumer = state["consumer"]
    if not alive or consumer is None:
        return False, why if not alive else "the consumer is not running yet"
    if consumer.blueprint.state != bootsteps.RUN:  # type: ignore[attr-defined]
        return False, "the consumer is not running (starting, restarting or stopping)"
    connection = consumer.connection
    if connection is None or not connection.connected:
        return False, "no connection to the broker"
    return True, f"taking tasks from {connection.transport_cls}"


def beat_ready() -> Answer:
    alive, why = live()
    if not alive:
        return False, why
    lease = state["lease"]
    held = "standalone" if lease is None else ("holds the beat lease" if lease() else "standby")
    return True, f"ticking ({held})"


class _ProcessCollector(Collector):
    """What only this process knows, read at each scrape."""

    def __init__(self, role: str) -> None:
        self.role = role

    def collect(self) -> Iterator[Any]:
        beat_at = state["beat_at"]
        if beat_at is not None:
            yield GaugeMetricFamily(
                f"millrace_{self.role}_heartbeat_age_seconds",
                "Seconds since the process's heartbeat last ran.",
                value=time.monotonic() - beat_at,
            )
        yield GaugeMetricFamily(
            f"millrace_{self.role}_ready", "1 while the process is ready (its /ready).",
            value=1.0 if (worker_ready if self.role == "worker" else beat_ready)()[0] else 0.0,
        )  # fmt: skip
        if self.role == "worker":
            yield from self._worker()
        elif state["lease"] is not None:
            yield GaugeMetricFamily(
                "millrace_beat_lease_held", "1 while this beat holds the lease and sends the jobs.",
                value=1.0 if state["lease"]() else 0.0,
            )  # fmt: skip

    @staticmethod
    def _worker() -> Iterator[Any]:
        from celery.worker import state as worker_state

        consumer = state["consumer"]
        connection = consumer.connection if consumer is not None else None
        yield GaugeMetricFamily(
            "millrace_worker_broker_connected", "1 while the worker holds a broker connection.",
            value=1.0 if connection is not None and connection.connected else 0.0,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "millrace_worker_tasks_active", "Tasks the worker is running now.",
            value=len(worker_state.active_requests),
        )  # fmt: skip
        tasks = CounterMetricFamily(
            "millrace_worker_tasks_received", "Tasks the worker received since it started.",
            labels=["task"],
        )  # fmt: skip
        for name, count in list(received.items()):
            tasks.add_metric([name], count)
        yield tasks


def start(role: str) -> None:
    """Serve this process's metrics port (once); a port that cannot be bound is a warning."""
    if _port:
        return
    from controller_app.access.tokens import token_keys
    from millrace.kernel.claims import TokenVerifier
    from millrace.kernel.tls import server_context

    node = settings.MILLRACE
    port = node.worker_metrics_port if role == "worker" else node.beat_metrics_port
    registry = CollectorRegistry()
    registry.register(_ProcessCollector(role))
    registry.register(BuildInfo())
    ProcessCollector(registry=registry)
    check: Callable[[str, str, str], None] | None = None
    if node.auth_enabled:
        check = TokenVerifier(token_keys()).check
    app = PortApp(
        live=live, ready=worker_ready if role == "worker" else beat_ready,
        registry=registry, check=check,
    )  # fmt: skip
    tls = settings.MILLRACE_TLS
    if tls.enabled and tls.cert_file:
        registry.register(CertificateEnd(tls.cert_file))
    try:
        _port.append(MetricsPort(
            node.metrics_host, port, app, server_context(tls) if tls.enabled else None
        ))  # fmt: skip
    except OSError as exc:
        log.warning("%s: no metrics port on %s:%d: %s", role, node.metrics_host, port, exc)
        return
    scheme = "https" if tls.enabled else "http"
    log.info("%s metrics on %s://%s/metrics", role, scheme, address())


def stop() -> None:
    while _port:
        _port.pop().close()
