"""The Celery application of Millrace (``celery -A millrace.project.celery worker|beat``).

Broker and options come from Django settings (the ``CELERY_*`` names in
``millrace.project.settings``): Redis when ``REDIS_URL`` is set, else kombu's filesystem
transport under the data directory.
Tasks are found in each installed app's ``tasks`` module. A Django process that sends tasks
must have imported this module (e.g. from the ``AppConfig.ready`` of the app defining them), so
that ``shared_task`` sends through this app and its broker, not Celery's default one.
"""

import contextlib
import os
import time
from typing import Any

from celery import Celery, signals
from celery.beat import PersistentScheduler

from millrace.kernel import logs
from millrace.kernel.config import LogSettings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.project.settings")

app = Celery("millrace")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def worker_queues() -> list[str]:
    """Every queue a Millrace worker consumes: the default one and each one tasks are routed to."""
    from django.conf import settings

    queues = {getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery")}
    for route in (getattr(settings, "CELERY_TASK_ROUTES", None) or {}).values():
        if isinstance(route, dict) and route.get("queue"):
            queues.add(route["queue"])
    return sorted(queues)


def worker_arguments(concurrency: int, log: LogSettings) -> list[str]:
    """``celery worker`` options of ``millrace worker`` (before the user's own)."""
    return [
        "--loglevel", log.level,
        "--concurrency", str(concurrency),
        "--queues", ",".join(worker_queues()),
        "--without-gossip", "--without-mingle",
    ]  # fmt: skip


def beat_arguments(log: LogSettings) -> list[str]:
    """``celery beat`` options of ``millrace beat`` (before the user's own)."""
    from django.conf import settings

    schedule = str(settings.CELERY_BEAT_SCHEDULE_FILENAME)
    return ["--loglevel", log.level, "--schedule", schedule]


@signals.setup_logging.connect
def _setup_logging(**kwargs: Any) -> None:
    """The node's logging (``millrace.kernel.logs``) instead of Celery's own: one format for
    every process, and the routine task traffic at DEBUG."""
    logs.configure(LogSettings.from_env())


# -- heartbeats (controller_app/heartbeats.py): what the health check knows of workers and beat

_worker_heartbeat: list[Any] = []


@signals.worker_ready.connect
def _start_worker_heartbeat(**kwargs: Any) -> None:
    from controller_app.heartbeats import HeartbeatThread

    thread = HeartbeatThread("worker")
    thread.start()
    _worker_heartbeat.append(thread)


@signals.worker_shutdown.connect
def _stop_worker_heartbeat(**kwargs: Any) -> None:
    while _worker_heartbeat:
        _worker_heartbeat.pop().stop()


class HeartbeatScheduler(PersistentScheduler):
    """Celery beat's scheduler that also records beat's heartbeat, at most every
    ``HEARTBEAT_INTERVAL_SECONDS``, from its tick: beat is alive as long as it ticks. On a
    shared metadata database (``DATABASE_URL``) several beats may run, on several hosts: only
    the holder of the ``beat`` lease sends the periodic jobs; the others stand by."""

    _last_heartbeat = 0.0
    _gate: Any = None

    def tick(self, *args: Any, **kwargs: Any) -> float:
        from controller_app import heartbeats

        now = time.monotonic()
        if now - self._last_heartbeat >= heartbeats.HEARTBEAT_INTERVAL_SECONDS:
            heartbeats.record("beat")
            self._last_heartbeat = now
        if not self._may_tick(now):
            return heartbeats.HEARTBEAT_INTERVAL_SECONDS  # standing by
        interval: float = super().tick(*args, **kwargs)
        return min(interval, heartbeats.HEARTBEAT_INTERVAL_SECONDS)

    def _may_tick(self, now: float) -> bool:
        from django.conf import settings

        if settings.MILLRACE.database_url is None:  # one host, one beat (the standalone)
            return True
        if self._gate is None:
            from controller_app.cluster.leader import holder_name
            from controller_app.cluster.leases import LeaseGate

            ttl = float(settings.MILLRACE.session_timeout_s) * 2
            self._gate = LeaseGate("beat", holder_name(), ttl_s=ttl, check_s=ttl / 5)
        return bool(self._gate.may_act(now))

    def close(self) -> None:
        from controller_app import heartbeats

        heartbeats.forget("beat")
        if self._gate is not None:  # another beat may take over at once
            with contextlib.suppress(Exception):
                self._gate.lease.release()
        super().close()
