"""Tokens: REST API tokens (one DRF token per user) and segment store delegation tokens.

Used by the local user commands (``controller_app.users``) and by ``millrace standalone``.
Tokens are DRF's ``rest_framework.authtoken`` keys (``Authorization: Token <key>``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from millrace.kernel.claims import mint_token


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
    return mint_token(settings.MILLRACE.token_secret, resource, access, ttl)
