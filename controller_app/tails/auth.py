"""Who a WebSocket client is: the session (browser console) or an API token.

Browsers cannot set headers on a WebSocket handshake, so a token may come as the query
parameter ``token=<key>`` as well as in ``Authorization: Token <key>`` (or ``Bearer <key>``).
``TokenAuthMiddleware`` runs inside Channels' ``AuthMiddlewareStack``: when the session gave no
user, a valid token does. Consumers decide what an anonymous user may do (nothing, while
authentication is on). ``OriginCheck`` (outermost) refuses foreign browser origins with a reason
and keeps session cookies away from handshakes without an ``Origin``.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlparse

from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from channels.security.websocket import OriginValidator
from django.db import InterfaceError, OperationalError

from controller_app.access.tokens import TokenExpiredError, user_of
from controller_app.outcomes import SERVICE_AWAY_SECONDS


def token_from_scope(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            kind, _, key = value.decode("latin-1").partition(" ")
            if kind.lower() in ("token", "bearer") and key.strip():
                return key.strip()
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    values = query.get("token")
    return values[-1] if values else None


@database_sync_to_async
def _user_for(key: str) -> Any:
    """The token's user; None for a token that is unknown or has expired (refused, as no
    token is)."""
    try:
        return user_of(key)
    except TokenExpiredError:
        return None


class TokenAuthMiddleware(BaseMiddleware):
    """Sets ``scope["user"]`` from an API token when the session did not authenticate."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        try:
            scope = await self._authenticated(scope)
        except (OperationalError, InterfaceError):  # the database is away: come back later
            message = "the metadata database is not answering; connect again shortly"
            return await deny(
                scope, receive, send, "database-unavailable", message, 503, CLOSE_TRY_AGAIN
            )
        return await super().__call__(scope, receive, send)

    async def _authenticated(self, scope: dict[str, Any]) -> dict[str, Any]:
        user = scope.get("user")
        if user is not None and hasattr(user, "_wrapped"):  # Channels' lazy user: resolve it
            user = await database_sync_to_async(lambda: user.is_authenticated and user)()
        if not (user and user.is_authenticated):
            key = token_from_scope(scope)
            found = await _user_for(key) if key else None
            if found is not None:
                scope = dict(scope, user=found)
        return scope


CLOSE_FORBIDDEN_ORIGIN = 4403
#: RFC 6455's "Try Again Later": a service the subscription needs is away.
CLOSE_TRY_AGAIN = 1013


class OriginCheck(OriginValidator):
    """The origin check where it protects: against other web pages riding on a browser.

    * A handshake that carries an ``Origin`` (every browser sends one) is refused unless its
      host is allowed (``MILLRACE_ALLOWED_HOSTS``), as Channels' ``AllowedHostsOriginValidator``
      does, but with the reason: an HTTP 403 with a JSON body ``{code, message}`` where the
      server can answer a handshake so (uvicorn's ``websocket.http.response`` extension), else
      an ``error`` message and close code 4403.
    * A handshake without an ``Origin`` comes from a program (Python's ``websockets``,
      ``websocat``): it gets in, but its cookies are dropped, so only a token (``Authorization``
      header or ``?token=``) can authenticate it, never a session cookie.
    """

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        headers = scope.get("headers", ())
        origin = next((value for name, value in headers if name.lower() == b"origin"), None)
        if origin is None:
            cookieless = [(name, value) for name, value in headers if name.lower() != b"cookie"]
            return await self.application(dict(scope, headers=cookieless), receive, send)
        text = origin.decode("latin-1")
        try:
            allowed = self.valid_origin(urlparse(text))
        except ValueError:
            allowed = False
        if allowed:
            return await self.application(scope, receive, send)
        message = (
            f"origin {text!r} is not allowed (MILLRACE_ALLOWED_HOSTS); programs that are not "
            "browsers send no Origin header and authenticate with a token"
        )
        return await deny(scope, receive, send, "forbidden-origin", message)


async def deny(
    scope: dict[str, Any], receive: Any, send: Any, code: str, message: str,
    status: int = 403, close_code: int = CLOSE_FORBIDDEN_ORIGIN,
) -> None:  # fmt: skip
    """Refuse a WebSocket handshake saying why: an HTTP ``status`` with ``{code, message}``
    when the server supports the denial response extension, else accept, send an ``error`` and
    close with ``close_code``."""
    if (await receive())["type"] != "websocket.connect":
        return
    body = json.dumps({"code": code, "message": message}).encode()
    if "websocket.http.response" in scope.get("extensions", {}):
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]  # fmt: skip
        if status == 503:
            headers.append((b"retry-after", str(SERVICE_AWAY_SECONDS).encode()))
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "websocket.accept"})
    error = {"type": "error", "code": code, "message": message}
    await send({"type": "websocket.send", "text": json.dumps(error)})
    await send({"type": "websocket.close", "code": close_code})


def origin_check(application: Any) -> OriginCheck:
    """``OriginCheck`` against the node's allowed hosts (what Channels'
    ``AllowedHostsOriginValidator`` allows)."""
    from django.conf import settings

    return OriginCheck(application, list(settings.ALLOWED_HOSTS))
