"""Signs of life of the Celery worker and beat processes: a file on their host and a row in
the metadata database.

Responsibility: a worker (from its ``worker_ready`` signal) and beat (from its scheduler's
tick, see ``controller_app.beat.HeartbeatScheduler``) each keep a status file
``<data dir>/run/heartbeat-<role>-<pid>.json`` and a ``ProcessHeartbeat`` row fresh. The
supervisor believes the file, and so does the health check while the database is away: it
does not depend on the database, so an outage of it (which the worker needs, and waits for)
does not make a live process look dead and get it killed. The row tells the health check (and
other hosts) otherwise. Either way a process that is stopped (SIGSTOP) or hung goes stale as
surely as one that died.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from controller_app.models import ProcessHeartbeat
from controller_app.operations import process_port
from millrace.kernel.status_files import (
    HEARTBEAT_FORGET_SECONDS,
    HEARTBEAT_INTERVAL_SECONDS,
    heartbeat_path,
    heartbeat_paths,
    read_fresh,
    write_status,
)

log = logging.getLogger(__name__)

_started = timezone.now()
#: Roles whose stale rows this process has deleted (it does so once, at its first heartbeat).
_cleaned: set[str] = set()


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def heartbeat_file(role: str, pid: int) -> Path:
    return heartbeat_path(settings.MILLRACE.data_dir, role, pid)


def local_age_seconds(role: str, pid: int | None = None) -> float | None:
    """Seconds since a process of ``role`` on this host (``pid``, or any) last beat, from its
    file; None when none beat in the last ``HEARTBEAT_FORGET_SECONDS``."""
    data_dir = settings.MILLRACE.data_dir
    paths = [heartbeat_file(role, pid)] if pid else heartbeat_paths(data_dir, role)
    ages = [
        time.time() - found["updated"]
        for found in (read_fresh(path, HEARTBEAT_FORGET_SECONDS) for path in paths)
        if found is not None
    ]
    return min(ages, default=None)


def record(role: str) -> None:
    """This process of ``role`` is alive now: its file, then its row. An error (a full disk,
    the database away) is logged, never raised: a heartbeat must not stop the process that
    sends it."""
    process_port.beating()
    now = timezone.now()
    path = heartbeat_file(role, os.getpid())
    metrics = process_port.address()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_status(path, {"role": role, "pid": os.getpid(), "metrics": metrics})
        if role not in _cleaned:  # once per process: files of processes long gone
            for old in heartbeat_paths(settings.MILLRACE.data_dir, role):
                if time.time() - old.stat().st_mtime > HEARTBEAT_FORGET_SECONDS:
                    old.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("%s heartbeat file not written: %s", role, exc)
    try:
        ProcessHeartbeat.objects.update_or_create(
            role=role,
            process=process_name(),
            defaults={"beat_at": now, "started_at": _started, "metrics_address": metrics},
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
    """This process stops cleanly: its file and row go (the role is down if no other process
    has one)."""
    heartbeat_file(role, os.getpid()).unlink(missing_ok=True)
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
