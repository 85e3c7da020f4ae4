"""Signs of life of the Celery worker and beat processes, kept in the metadata database.

Responsibility: a worker (from its ``worker_ready`` signal) and beat (from its scheduler's
tick, see ``millrace.celery.HeartbeatScheduler``) each keep one ``ProcessHeartbeat`` row fresh;
``latest`` tells the health check when a role last showed life. The database carries them, so
it works the same with the embedded broker and with Redis, on one host or many, and a process
that is stopped (SIGSTOP) or hung goes stale as surely as one that died.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading

from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from controller_app.models import ProcessHeartbeat

log = logging.getLogger(__name__)

#: Seconds between two heartbeats of a process.
HEARTBEAT_INTERVAL_SECONDS = 2.0
#: A role whose newest heartbeat is older than this is down.
HEARTBEAT_STALE_SECONDS = 10.0
#: Rows of processes silent for this long are deleted, when a process of the role starts
#: (restarted processes get new rows).
HEARTBEAT_FORGET_SECONDS = 3600.0

_started = timezone.now()
#: Roles whose stale rows this process has deleted (it does so once, at its first heartbeat).
_cleaned: set[str] = set()


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def record(role: str) -> None:
    """This process of ``role`` is alive now. A database error is logged, never raised: a
    heartbeat must not stop the process that sends it."""
    now = timezone.now()
    try:
        ProcessHeartbeat.objects.update_or_create(
            role=role, process=process_name(), defaults={"beat_at": now, "started_at": _started}
        )
        if role not in _cleaned:  # once per process: rows of processes long gone
            forget = now - dt.timedelta(seconds=HEARTBEAT_FORGET_SECONDS)
            ProcessHeartbeat.objects.filter(role=role, beat_at__lt=forget).delete()
            _cleaned.add(role)
    except DatabaseError as exc:
        log.warning("%s heartbeat not recorded: %s", role, exc)
    finally:
        close_old_connections()


def forget(role: str) -> None:
    """This process stops cleanly: its row goes (the role is down if no other process has one)."""
    try:
        ProcessHeartbeat.objects.filter(role=role, process=process_name()).delete()
    except DatabaseError as exc:
        log.warning("%s heartbeat not removed: %s", role, exc)


def latest(role: str) -> ProcessHeartbeat | None:
    """The freshest heartbeat of ``role``, or None if it never beat."""
    return ProcessHeartbeat.objects.filter(role=role).order_by("-beat_at").first()


def age_seconds(heartbeat: ProcessHeartbeat) -> float:
    return (timezone.now() - heartbeat.beat_at).total_seconds()


class HeartbeatThread(threading.Thread):
    """Records a heartbeat of ``role`` every ``HEARTBEAT_INTERVAL_SECONDS`` until stopped."""

    def __init__(self, role: str) -> None:
        super().__init__(name=f"{role}-heartbeat", daemon=True)
        self.role = role
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            record(self.role)
            self.stopped.wait(HEARTBEAT_INTERVAL_SECONDS)

    def stop(self) -> None:
        self.stopped.set()
        self.join(HEARTBEAT_INTERVAL_SECONDS * 2)
        forget(self.role)
