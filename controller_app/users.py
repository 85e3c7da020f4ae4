"""Users and their roles, made by the local commands (``millrace user create``, ``millrace
token create``) and the standalone's first administrator; each one audited."""

from __future__ import annotations

import getpass
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from controller_app.audit import record
from controller_app.roles import ROLES, grant, role_of
from controller_app.tokens import expires_at, token_for
from millrace.kernel.config import write_secret_file


def create_user_token(
    username: str, *, superuser: bool = False, rotate: bool = False, role: str = "operator"
) -> str:
    """The token of ``username`` (created, without a password, if the user does not exist).

    A new user gets ``role`` (``controller_app.roles``); ``superuser`` makes it an
    administrator instead. ``rotate`` replaces an existing token, which stops the old one
    working at once.
    """
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    if user is None:
        if superuser:
            user = user_model.objects.create_superuser(username, password=None)
        else:
            user = user_model.objects.create_user(username, password=None)
        grant(user, "admin" if superuser else role)  # type: ignore[arg-type]
        audit_local("user.create", username)
    if rotate:
        Token.objects.filter(user=user).delete()
        audit_local("token.rotate", username)
    return token_for(user)


def create_user(username: str, role: str) -> tuple[str, str]:
    """A new user with ``role`` and a random console password: ``(password, API token)``.
    ``ValueError`` when the name is taken or the role is not one of the three."""
    if role not in ROLES:
        raise ValueError(f"--role must be one of {', '.join(ROLES)}, not {role!r}")
    user_model = get_user_model()
    if not username or user_model.objects.filter(username=username).exists():
        raise ValueError(f"user {username!r} exists already" if username else "empty user name")
    password = secrets.token_urlsafe(12)
    user = user_model.objects.create_user(username, password=password)
    grant(user, role)  # type: ignore[arg-type]
    audit_local("user.create", username, f"role {role}")
    return password, token_for(user)


def api_tokens() -> list[dict[str, Any]]:
    """Every API token: its user, the user's role, when it was made and expires, and the first
    characters of its key (enough to tell two apart, never enough to use)."""
    found = []
    for token in Token.objects.select_related("user").order_by("user__username"):
        end = expires_at(token)
        found.append({
            "user": token.user.username,
            "role": role_of(token.user),
            "created": token.created.strftime("%Y-%m-%d %H:%M"),
            "expires": end.strftime("%Y-%m-%d %H:%M") if end else None,
            "prefix": token.key[:6],
        })  # fmt: skip
    return found


def rotate_token(username: str) -> str:
    """A new API token for ``username``; the old one stops working at once. A token file of
    the node's data directory (``admin-token``, which the local commands read) that held the
    old token gets the new one, so that they go on working."""
    user = _existing(username)
    old = list(Token.objects.filter(user=user).values_list("key", flat=True))
    Token.objects.filter(user=user).delete()
    audit_local("token.rotate", username)
    new = token_for(user)
    _replace_in_token_file(old, new)
    return new


def _replace_in_token_file(old: list[str], new: str) -> None:
    path = Path(settings.MILLRACE.data_dir) / "admin-token"
    try:
        held = path.read_text().strip()
    except OSError:
        return
    if held and held in old:
        write_secret_file(path, new)


def revoke_token(username: str) -> None:
    """Delete the API token of ``username``: it stops working at once."""
    user = _existing(username)
    if not Token.objects.filter(user=user).delete()[0]:
        raise ValueError(f"user {username!r} has no API token")
    audit_local("token.revoke", username)


def _existing(username: str) -> Any:
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ValueError(f"no user {username!r}")
    return user


def audit_local(action: str, obj: str, detail: str = "") -> None:
    """An audit row for a change made by a local command (``millrace user/token ...``)."""
    record(action, obj, username=f"local:{getpass.getuser()}", source="cli", address="local",
           detail=detail)  # fmt: skip
