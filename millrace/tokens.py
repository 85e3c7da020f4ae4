"""Tokens: REST API tokens (one DRF token per user) and segment store delegation tokens.

Used by ``millrace token create USER`` and by ``millrace standalone`` for the administrator.
Tokens are DRF's ``rest_framework.authtoken`` keys (``Authorization: Token <key>``).
"""

from __future__ import annotations

from typing import Any


def token_for(user: Any) -> str:
    """The API token of ``user``, created if it has none."""
    from rest_framework.authtoken.models import Token

    token, _ = Token.objects.get_or_create(user=user)
    return str(token.key)


def create_user_token(username: str, *, superuser: bool = False, rotate: bool = False) -> str:
    """The token of ``username`` (created, without a password, if the user does not exist).

    ``superuser`` makes a new user an administrator; ``rotate`` replaces an existing token,
    which stops the old one working at once.
    """
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    if user is None:
        if superuser:
            user = user_model.objects.create_superuser(username, password=None)
        else:
            user = user_model.objects.create_user(username, password=None)
    if rotate:
        Token.objects.filter(user=user).delete()
    return token_for(user)


def delegation_token(resource: str, access: str, ttl_seconds: float | None = None) -> str:
    """A segment store delegation token for ``resource`` (``scope/stream/``, a segment, or
    ``*``), signed with the cluster's token secret, valid ``ttl_seconds`` (default: the
    node's ``MILLRACE_TOKEN_TTL_SECONDS``); empty when authentication is off. The secret is the
    node's (``WebSettings.token_secret``, read from the environment once, at the edge)."""
    from django.conf import settings

    if not settings.MILLRACE.auth_enabled:
        return ""
    from millrace.claims import mint_token

    ttl = settings.MILLRACE.token_ttl_seconds if ttl_seconds is None else ttl_seconds
    return mint_token(settings.MILLRACE.token_secret, resource, access, ttl)
