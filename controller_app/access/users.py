"""Users and their roles, made by the local commands (``millrace user ...``, ``millrace token
create``), the console's Security page and the standalone's first administrator; each change
audited. No change leaves the node without an active administrator."""

from __future__ import annotations

import getpass
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from controller_app.access.roles import grant, role_of
from controller_app.access.tokens import expires_at, token_for
from controller_app.audit import record
from millrace.kernel.claims import ROLES
from millrace.kernel.config import write_secret_file


def create_user_token(
    username: str, *, superuser: bool = False, rotate: bool = False, role: str = "operator"
) -> str:
    """The token of ``username`` (created, without a password, if the user does not exist).

    A new user gets ``role`` (``controller_app.access.roles``); ``superuser`` makes it an
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


def create_user(username: str, role: str, audit_as: Audit | None = None) -> tuple[str, str]:
    """A new user with ``role`` and a random console password: ``(password, API token)``.
    ``ValueError`` when the name is taken or the role is not one of the three."""
    if role not in ROLES:
        raise ValueError(f"the role must be one of {', '.join(ROLES)}, not {role!r}")
    user_model = get_user_model()
    if not username or user_model.objects.filter(username=username).exists():
        raise ValueError(f"user {username!r} exists already" if username else "empty user name")
    password = secrets.token_urlsafe(12)
    user = user_model.objects.create_user(username, password=password)
    grant(user, role)
    (audit_as or audit_local)("user.create", username, f"role {role}")
    return password, token_for(user)


def users() -> list[dict[str, Any]]:
    """Every user: name, role, whether it may sign in, when it was made and last signed in to
    the console, and whether it has an API token."""
    with_token = set(Token.objects.values_list("user_id", flat=True))
    return [
        {
            "user": user.username,
            "role": granted_role(user),
            "active": user.is_active,
            "joined": user.date_joined.strftime("%Y-%m-%d %H:%M"),
            "last_sign_in": user.last_login.strftime("%Y-%m-%d %H:%M") if user.last_login else None,
            "token": user.pk in with_token,
        }
        for user in get_user_model().objects.order_by("username").prefetch_related("groups")
    ]


def granted_role(user: Any) -> str:
    """The strongest role ``user`` was given ('' for none), whether or not it is active."""
    if user.is_superuser:
        return "admin"
    names = {group.name for group in user.groups.all()}
    return next((role for role in ROLES if role in names), "")


def set_role(username: str, role: str, audit_as: Audit | None = None) -> None:
    """Give ``username`` ``role`` (only that one)."""
    if role not in ROLES:
        raise ValueError(f"the role must be one of {', '.join(ROLES)}, not {role!r}")
    user = _existing(username)
    if role != "admin":
        _keep_an_admin(user, f"make {username} {role}")
    if user.is_superuser and role != "admin":
        user.is_superuser = False
        user.save(update_fields=["is_superuser"])
    grant(user, role)
    (audit_as or audit_local)("user.role", username, f"role {role}")


def new_password(username: str, audit_as: Audit | None = None) -> str:
    """A new random console password for ``username`` (the old one stops working)."""
    user = _existing(username)
    password = secrets.token_urlsafe(12)
    user.set_password(password)
    user.save(update_fields=["password"])
    (audit_as or audit_local)("user.password", username)
    return password


def set_active(username: str, active: bool, audit_as: Audit | None = None) -> None:
    """Let ``username`` sign in and use its token again, or stop it (``active=False``: its
    console password and API token are refused at once, nothing is deleted)."""
    user = _existing(username)
    if not active:
        _keep_an_admin(user, f"disable {username}")
    user.is_active = active
    user.save(update_fields=["is_active"])
    (audit_as or audit_local)("user.enable" if active else "user.disable", username)


def delete_user(username: str, audit_as: Audit | None = None) -> None:
    """Delete ``username`` and its API token."""
    user = _existing(username)
    _keep_an_admin(user, f"delete {username}")
    user.delete()
    (audit_as or audit_local)("user.delete", username)


def _keep_an_admin(user: Any, change: str) -> None:
    """``ValueError`` when ``user`` is the last active administrator."""
    if not (user.is_active and granted_role(user) == "admin"):
        return
    others = get_user_model().objects.filter(is_active=True).exclude(pk=user.pk)
    admins = [u for u in others.prefetch_related("groups") if granted_role(u) == "admin"]
    if not admins:
        raise ValueError(f"cannot {change}: it is the last active administrator")


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


#: Records a change: ``(action, object, detail)``; the local commands' is ``audit_local``.
Audit = Callable[..., None]


def audit_local(action: str, obj: str, detail: str = "") -> None:
    """An audit row for a change made by a local command (``millrace user/token ...``)."""
    record(action, obj, username=f"local:{getpass.getuser()}", source="cli", address="local",
           detail=detail)  # fmt: skip
