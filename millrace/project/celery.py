"""The Celery application of Millrace (``celery -A millrace.project.celery worker|beat``).

Broker and options come from Django settings (the ``CELERY_*`` names in
``millrace.project.settings``): Redis when ``REDIS_URL`` is set, else kombu's filesystem
transport under the data directory.
Tasks are found in each installed app's ``tasks`` module. The project package imports this
module (as Celery's Django guide does), so that every Django process has it and
``shared_task`` sends through this app and its broker, not Celery's default one. Beat's
scheduler and the worker's heartbeat are the controller's (``controller_app.beat``).
"""

import os
from typing import Any

from celery import Celery, signals

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
