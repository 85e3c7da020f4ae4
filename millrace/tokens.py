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


def create_user_token(
    username: str, *, superuser: bool = False, rotate: bool = False, role: str = "operator"
) -> str:
    """The token of ``username`` (created, without a password, if the user does not exist).

    A new user gets ``role`` (``controller_app.roles``); ``superuser`` makes it an
    administrator instead. ``rotate`` replaces an existing token, which stops the old one
    working at once.
    """
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from controller_app.roles import grant

    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    if user is None:
        if superuser:
            user = user_model.objects.create_superuser(username, password=None)
        else:
            user = user_model.objects.create_user(username, password=None)
        grant(user, "admin" if superuser else role)  # type: ignore[arg-type]
        _audit_local("user.create", username)
    if rotate:
        Token.objects.filter(user=user).delete()
        _audit_local("token.rotate", username)
    return token_for(user)


def create_user(username: str, role: str) -> tuple[str, str]:
    """A new user with ``role`` and a random console password: ``(password, API token)``.
    ``ValueError`` when the name is taken or the role is not one of the three."""
    import secrets

    from django.contrib.auth import get_user_model

    from controller_app.roles import ROLES, grant

    if role not in ROLES:
        raise ValueError(f"--role must be one of {', '.join(ROLES)}, not {role!r}")
    user_model = get_user_model()
    if not username or user_model.objects.filter(username=username).exists():
        raise ValueError(f"user {username!r} exists already" if username else "empty user name")
    password = secrets.token_urlsafe(12)
    user = user_model.objects.create_user(username, password=password)
    grant(user, role)  # type: ignore[arg-type]
    _audit_local("user.create", username, f"role {role}")
    return password, token_for(user)


def _audit_local(action: str, obj: str, detail: str = "") -> None:
    """An audit row for a change made by a local command (``millrace user/token ...``)."""
    import getpass

    from controller_app.audit import record

    record(action, obj, username=f"local:{getpass.getuser()}", source="cli", address="local",
           detail=detail)  # fmt: skip


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
