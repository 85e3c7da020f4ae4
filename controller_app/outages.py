"""The services around a node that can be away: the metadata database and the broker.

Responsibility: tell an error that means "a service this request needs is down" from a bug,
and name the service, so that every face answers it alike: REST and the console with 503
``{code, message}`` and ``Retry-After``, the WebSocket consumers with a close code that asks
the client to come back. ``service_down`` is the one place that knows which exceptions these
are; the database's own message is never shown (it may carry a connection string).
"""

from __future__ import annotations

import time

from django.conf import settings
from django.db import InterfaceError, OperationalError

from controller_app.errors import BrokerUnavailableError

DATABASE_UNAVAILABLE = "database-unavailable"
BROKER_UNAVAILABLE = "broker-unavailable"


#: When this process last saw the metadata database fail (Unix ms; 0: never).
_database_failed_at_ms = 0


def database_failed_at_ms() -> int:
    """When this process last saw the metadata database fail (Unix ms, 0 if never): the end of
    the last outage it saw, give or take a request. Reader groups do not count syncs missed
    before it against their readers (their syncs could not be answered)."""
    if "no-sync-grace" in settings.MILLRACE.unsafe:  # TEST-ONLY: missed syncs count
        return 0
    return _database_failed_at_ms


def service_down(exc: BaseException) -> tuple[str, str] | None:
    """(code, message) when ``exc`` says the metadata database or the broker is away, else
    None (the error is something else, a bug for instance). A database failure is noted
    (``database_failed_at_ms``)."""
    if "no-service-503" in settings.MILLRACE.unsafe:  # TEST-ONLY: the old 500
        return None
    if isinstance(exc, (OperationalError, InterfaceError)):
        global _database_failed_at_ms
        _database_failed_at_ms = int(time.time() * 1000)
        return DATABASE_UNAVAILABLE, (
            "the metadata database is not answering; appends and reads of known segments go "
            "on, ask again shortly"
        )
    if isinstance(exc, BrokerUnavailableError):
        return BROKER_UNAVAILABLE, str(exc)
    return None
