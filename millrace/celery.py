"""The Celery application of Millrace (``celery -A millrace.celery worker|beat``).

Broker and options come from Django settings (the ``CELERY_*`` names in ``millrace.settings``):
Redis when ``REDIS_URL`` is set, else kombu's filesystem transport under the data directory.
Tasks are found in each installed app's ``tasks`` module. A Django process that sends tasks
must have imported this module (e.g. from the ``AppConfig.ready`` of the app defining them), so
that ``shared_task`` sends through this app and its broker, not Celery's default one.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.settings")

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


def worker_arguments(concurrency: int) -> list[str]:
    """``celery worker`` options of ``millrace worker`` (before the user's own)."""
    return [
        "--loglevel", "INFO",
        "--concurrency", str(concurrency),
        "--queues", ",".join(worker_queues()),
        "--without-gossip", "--without-mingle",
    ]  # fmt: skip
