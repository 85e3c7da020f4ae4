"""Tokens: REST API tokens (one DRF token per user) and segment store delegation tokens.

Used by the local user commands (``controller_app.access.users``) and by ``millrace standalone``.
Tokens are DRF's ``rest_framework.authtoken`` keys (``Authorization: Token <key>``).
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

from django.conf import settings
from django.utils import timezone

from controller_app.access.grants import access_to_stream
from millrace.kernel.claims import TokenKeys, mint_token, stream_resource


class TokenExpiredError(Exception):
    """An API token older than ``MILLRACE_API_TOKEN_TTL_DAYS``; the message says what to do."""


def expires_at(token: Any) -> datetime.datetime | None:
    """When the API token ``token`` (a DRF ``Token``) stops working; None: never."""
    days = settings.MILLRACE.api_token_ttl_days
    return token.created + datetime.timedelta(days=days) if days else None


def user_of(key: str) -> Any:
    """The active user whose API token is ``key``; None for no such token (or an inactive
    user); ``TokenExpiredError`` for an expired one."""
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return None
    end = expires_at(token)
    if end is not None and end <= timezone.now():
        raise TokenExpiredError(
            f"the API token of {token.user.username} expired on {end:%Y-%m-%d %H:%M} UTC "
            f"(MILLRACE_API_TOKEN_TTL_DAYS); `millrace token rotate {token.user.username}` "
            "makes a new one"
        )
    return token.user


def token_for(user: Any) -> str:
    """The API token of ``user``, created if it has none."""
    from rest_framework.authtoken.models import Token

    token, _ = Token.objects.get_or_create(user=user)
    return str(token.key)


def delegation_token(resource: str, access: str, ttl_seconds: float | None = None) -> str:
    """A segment store delegation token for ``resource`` (``scope/stream/``, a segment, or
    ``*``), signed with the cluster's token secret, valid ``ttl_seconds`` (default: the
    node's ``MILLRACE_TOKEN_TTL_SECONDS``); empty when authentication is off. The secret is the
    node's (``WebSettings.token_secret``, read from the environment once, at the edge)."""
    if not settings.MILLRACE.auth_enabled:
        return ""
    ttl = settings.MILLRACE.token_ttl_seconds if ttl_seconds is None else ttl_seconds
    return mint_token(token_keys().signing, resource, access, ttl)


def stream_token_for(user: Any, scope: str, stream: str) -> str:
    """The delegation token a caller gets for the segments of ``scope/stream`` (a table's
    ``<table>_kvtable`` and a reader group's ``_RG<name>`` too): read and update where its
    grants (or role) allow ``READ_UPDATE`` on the stream's resource, read only where they allow
    ``READ``; ``PermissionRefusedError`` where they allow neither. The one rule of REST, gRPC
    and the console; the segment stores check each request's segment against it."""
    return delegation_token(stream_resource(scope, stream), access_to_stream(user, scope, stream))


@functools.cache
def token_keys() -> TokenKeys:
    """The node's token secrets: ``MILLRACE_TOKEN_SECRET`` (or the persisted one), or, after a
    rotation, the keyring file's (re-read when it changes)."""
    node = settings.MILLRACE
    return TokenKeys(
        node.token_secret, node.token_keyring, overlap="no-token-overlap" not in node.unsafe
    )
