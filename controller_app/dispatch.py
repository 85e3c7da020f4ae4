"""Sending the controller's Celery tasks by name: what workflows use to hand work to a worker.

Workflows record their intent in the database, then send the task that carries it on, once
the database transaction commits (``send_on_commit``: a task sent before the commit could run
before its intent is visible, or for an intent rolled back). Tasks are sent by name through the
current Celery app (Millrace's, loaded by ``ControllerAppConfig.ready``), so workflows never
import ``controller_app.tasks`` and ``tasks`` may import the workflows without a circle. Queues
come from ``CELERY_TASK_ROUTES``, which routes by these names.

A broker that does not take a task (Redis away) is ``BrokerUnavailableError``: the intent is in
the database already, so repeating the request sends the task again, and so does the sweeper.
"""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.db import transaction
from kombu.exceptions import KombuError

from controller_app.errors import BrokerUnavailableError
from controller_app.task_names import (
    ABORT_TRANSACTION,
    AUTOSCALE,
    CANARY,
    COMMIT_TRANSACTIONS,
    COMPLETED_TRANSACTION_CLEANUP,
    CREATE_STREAM,
    DELETE_STREAM,
    QUOTAS,
    READER_GROUP_LAG,
    RETENTION,
    RETENTION_BUCKET,
    SCALE_STREAM,
    SEAL_STREAM,
    SWEEP,
    TRANSACTION_TIMEOUTS,
    TRUNCATE_STREAM,
    WATERMARK_BUCKET,
    WATERMARKS,
)

#: The task names are ``task_names``'; they are here too, for the workflows that send them.
__all__ = [
    "ABORT_TRANSACTION",
    "AUTOSCALE",
    "CANARY",
    "COMMIT_TRANSACTIONS",
    "COMPLETED_TRANSACTION_CLEANUP",
    "CREATE_STREAM",
    "DELETE_STREAM",
    "QUOTAS",
    "READER_GROUP_LAG",
    "RETENTION",
    "RETENTION_BUCKET",
    "SCALE_STREAM",
    "SEAL_STREAM",
    "SWEEP",
    "TRANSACTION_TIMEOUTS",
    "TRUNCATE_STREAM",
    "WATERMARKS",
    "WATERMARK_BUCKET",
    "send",
    "send_on_commit",
]


def send(task: str, *args: Any, countdown: float | None = None) -> None:
    """Send the task named ``task`` now."""
    try:
        current_app.send_task(task, args=args, countdown=countdown)
    except Exception as exc:
        if not isinstance(exc, (KombuError, OSError, *_broker_errors())):
            raise
        raise BrokerUnavailableError(
            f"the broker did not take the task ({type(exc).__name__}); the request is "
            "recorded and is carried out once the broker is back (asking again is safe)"
        ) from exc


def _broker_errors() -> tuple[type[BaseException], ...]:
    """The connection errors of the broker's transport (redis-py's, for Redis)."""
    conn = current_app.connection_for_write()
    try:
        return tuple(conn.connection_errors) + tuple(conn.channel_errors)
    finally:
        conn.release()


def send_on_commit(task: str, *args: Any, countdown: float | None = None) -> None:
    """Send the task named ``task`` once the current database transaction commits (at once
    outside one)."""
    transaction.on_commit(lambda: send(task, *args, countdown=countdown))
