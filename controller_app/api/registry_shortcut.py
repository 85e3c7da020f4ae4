"""The schema registry's lookup by id, answered in front of Django (ADR 0015).

``GET /registry/schemas/ids/<id>`` is what every Confluent deserializer asks the first time it
meets a schema id, and what a typed reader asks per id: the hottest call of the registry, a
primary-key read of an answer that never changes. Through Django's whole request path (the
middleware, DRF, three queries to authenticate and authorize) it took about 13 ms on the
node, against 0.3 ms for uvicorn alone.

So an ASGI middleware in front of Django answers it itself when it can tell the caller may:
a credential (the ``Authorization`` header: a token or Basic) that Django allowed a registry
read with less than ``ALLOWED_SECONDS`` ago, remembered by an HMAC of it under a key of this
process, with the generation of the credentials it was allowed under. In a worker thread, one
primary-key read checks that generation is still the current one
(``CredentialsGeneration``: every change to a user, a token or a group bumps it, in whichever
process makes it: this controller, another of the cluster, the command line), and the schema
is read with the registry's own ``schema_by_id`` and rendered as the view renders it. Anything
else goes to Django as before: another path, a query string, an unknown, stale or changed
credential, a cookie, a schema not found, any error (which Django then answers as it always
does, a 503 for a database that is away). So a credential is never taken here that Django
would refuse now.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections

__all__ = ["ALLOWED_SECONDS", "RegistryShortcut", "allow", "changed"]

log = logging.getLogger(__name__)

#: How long a credential Django allowed a registry read is taken here without asking it.
ALLOWED_SECONDS = 5.0
ALLOWED_MAX = 10_000
PATH = re.compile(r"/registry/schemas/ids/([0-9]{1,10})")
_KEY = secrets.token_bytes(32)
#: credential HMAC -> (until when, the credentials' generation it was allowed under)
_allowed: dict[bytes, tuple[float, int]] = {}


class ChangedError(Exception):
    """The credentials changed since the caller's was allowed: Django must judge it."""


def _digest(credential: bytes) -> bytes:
    return hmac.new(_KEY, credential, hashlib.sha256).digest()


def allow(credential: str, generation: int) -> None:
    """Remember that Django allowed a registry read with this ``Authorization`` header, under
    the credentials' ``generation`` (read before Django verified it)."""
    if not credential:
        return
    if len(_allowed) >= ALLOWED_MAX:
        _allowed.clear()
    until = time.monotonic() + ALLOWED_SECONDS
    _allowed[_digest(credential.encode("latin-1"))] = (until, generation)


def changed(*args: Any, **kwargs: Any) -> None:
    """A user, a token or a group changed (a signal receiver): bump the credentials'
    generation, and forget what this process remembers."""
    from controller_app.models import CredentialsGeneration

    _allowed.clear()
    CredentialsGeneration.bump()


def _allowed_under(credential: bytes) -> int | None:
    """The generation the credential was allowed under lately, or None."""
    found = _allowed.get(_digest(credential))
    return found[1] if found is not None and found[0] > time.monotonic() else None


def _answer(schema_id: int, generation: int) -> bytes:
    from controller_app.api.registry_media import RegistryRenderer
    from controller_app.models import CredentialsGeneration
    from controller_app.registry import service

    close_old_connections()  # (a connection the database dropped is made anew)
    if CredentialsGeneration.current() != generation:
        raise ChangedError
    return bytes(RegistryRenderer().render(service.schema_by_id(schema_id)))


class RegistryShortcut:
    """ASGI: the lookup by id for a credential allowed lately; the rest to ``app``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.answer = sync_to_async(_answer, thread_sensitive=False)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            found = PATH.fullmatch(scope["path"])
            credential = dict(scope["headers"]).get(b"authorization") if found else None
            generation = _allowed_under(credential) if found and credential else None
            if found and generation is not None:
                try:
                    body = await self.answer(int(found[1]), generation)
                except Exception:  # (not found, the database away: Django answers)
                    log.debug("registry shortcut: Django answers %s", scope["path"], exc_info=True)
                else:
                    await _send(send, body)
                    return
        await self.app(scope, receive, send)


async def _send(send: Any, body: bytes) -> None:
    from controller_app.api.registry_media import MEDIA_TYPE

    headers = [
        (b"content-type", MEDIA_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
