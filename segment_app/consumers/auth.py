"""Who a WebSocket client is: the session (browser console) or an API token.

Browsers cannot set headers on a WebSocket handshake, so a token may come as the query
parameter ``token=<key>`` as well as in ``Authorization: Token <key>`` (or ``Bearer <key>``).
``TokenAuthMiddleware`` runs inside Channels' ``AuthMiddlewareStack``: when the session gave no
user, a valid token does. Consumers decide what an anonymous user may do (nothing, while
authentication is on).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware


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
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return None
    return token.user


class TokenAuthMiddleware(BaseMiddleware):
    """Sets ``scope["user"]`` from an API token when the session did not authenticate."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        user = scope.get("user")
        if user is not None and hasattr(user, "_wrapped"):  # Channels' lazy user: resolve it
            user = await database_sync_to_async(lambda: user.is_authenticated and user)()
        if not (user and user.is_authenticated):
            key = token_from_scope(scope)
            found = await _user_for(key) if key else None
            if found is not None:
                scope = dict(scope, user=found)
        return await super().__call__(scope, receive, send)
