"""Beat's scheduler and the worker's heartbeat: what the controller adds to Celery.

``HeartbeatScheduler`` is beat's scheduler (``CELERY_BEAT_SCHEDULER``): it records beat's
heartbeat from its tick and, on a shared metadata database, sends the periodic jobs only while
it holds the ``beat`` lease. A worker records its heartbeat from a thread it starts when Celery
says it is ready (``connect_worker_heartbeat``, from the app's ``ready``). The health check
reads both (``controller_app.operations.heartbeats``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from celery import signals
from celery.beat import PersistentScheduler

from controller_app.operations import heartbeats, process_port
from millrace.kernel import status_files

__all__ = ["HeartbeatScheduler", "connect_worker_heartbeat"]

_worker_heartbeat: list[Any] = []


def connect_worker_heartbeat() -> None:
    """Start the heartbeat thread when a worker is ready, stop it when it shuts down."""
    signals.worker_ready.connect(_start_worker_heartbeat, weak=False)
    signals.worker_shutdown.connect(_stop_worker_heartbeat, weak=False)


def _start_worker_heartbeat(sender: Any = None, **kwargs: Any) -> None:
    process_port.state["consumer"] = sender
    signals.task_received.connect(_task_received, weak=False)
    process_port.start("worker")
    thread = heartbeats.HeartbeatThread("worker")
    thread.start()
    _worker_heartbeat.append(thread)


def _stop_worker_heartbeat(**kwargs: Any) -> None:
    while _worker_heartbeat:
        _worker_heartbeat.pop().stop()
    process_port.stop()


def _task_received(request: Any = None, **kwargs: Any) -> None:
    if request is not None:
        process_port.received[request.name] += 1


class HeartbeatScheduler(PersistentScheduler):
    """Celery beat's scheduler that also records beat's heartbeat, at most every
    ``HEARTBEAT_INTERVAL_SECONDS``, from its tick: beat is alive as long as it ticks. On a
    shared metadata database (``DATABASE_URL``) several beats may run, on several hosts: only
    the holder of the ``beat`` lease sends the periodic jobs; the others stand by."""

    _last_heartbeat = 0.0
    _gate: Any = None

    def tick(self, *args: Any, **kwargs: Any) -> float:
        now = time.monotonic()
        if not self._last_heartbeat:  # the first tick
            process_port.start("beat")
        if now - self._last_heartbeat >= status_files.HEARTBEAT_INTERVAL_SECONDS:
            heartbeats.record("beat")
            self._last_heartbeat = now
        if not self._may_tick(now):
            return status_files.HEARTBEAT_INTERVAL_SECONDS  # standing by
        interval: float = super().tick(*args, **kwargs)
        return min(interval, status_files.HEARTBEAT_INTERVAL_SECONDS)

    def _may_tick(self, now: float) -> bool:
        from django.conf import settings

        if settings.MILLRACE.database_url is None:  # one host, one beat (the standalone)
            return True
        if self._gate is None:
            from controller_app.cluster.leader import holder_name
            from controller_app.cluster.leases import LeaseGate

            ttl = float(settings.MILLRACE.session_timeout_s) * 2
            self._gate = LeaseGate("beat", holder_name(), ttl_s=ttl, check_s=ttl / 5)
            gate = self._gate
            process_port.state["lease"] = lambda: gate.held(time.monotonic())
        return bool(self._gate.may_act(now))

    def close(self) -> None:
        heartbeats.forget("beat")
        process_port.stop()
        if self._gate is not None:  # another beat may take over at once
            with contextlib.suppress(Exception):
                self._gate.lease.release()
        super().close()
