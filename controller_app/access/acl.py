"""Managing grants (``models.Grant``): grant, revoke, list, check, groups' members, and Pravega's
password file imported. Used by the REST API (``/v1/acl``), the console's Security page and
``millrace acl``; every change is audited (``audit_as``: the caller's audit writer).

A principal is ``user:NAME`` or ``group:NAME`` (a bare name is a user). A group named in a grant
is made if it does not exist; ``join``/``leave`` change its members.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import BasePasswordHasher, mask_hash
from django.contrib.auth.models import Group
from django.db import transaction

from controller_app.access import grants
from controller_app.errors import InvalidArgumentError, NotFoundError
from controller_app.models import Grant

Audit = Callable[[str, str, str], None]
#: The longest password value Django keeps (``AbstractBaseUser.password``).
PASSWORD_LENGTH_MAX = 128


def _principal(text: str, *, make_group: bool = False) -> dict[str, Any]:
    """``{"user": ...}`` or ``{"group": ...}`` for ``user:NAME`` / ``group:NAME`` / ``NAME``."""
    kind, colon, name = text.strip().partition(":")
    if not colon:
        kind, name = "user", kind
    if kind not in ("user", "group") or not name:
        raise InvalidArgumentError(f"a principal is user:NAME or group:NAME, not {text!r}")
    if kind == "group":
        if make_group:
            return {"group": Group.objects.get_or_create(name=name)[0]}
        found = Group.objects.filter(name=name).first()
        if found is None:
            raise NotFoundError(f"no group named {name!r}")
        return {"group": found}
    user = get_user_model().objects.filter(username=name).first()
    if user is None:
        raise NotFoundError(f"no user named {name!r}")
    return {"user": user}


def _permission(text: str) -> str:
    permission = text.strip().upper()
    if permission not in grants.PERMISSIONS:
        known = ", ".join(grants.PERMISSIONS)
        raise InvalidArgumentError(f"the permission must be one of {known}, not {text!r}")
    return permission


def describe(row: Grant) -> dict[str, Any]:
    return {
        "id": row.id,
        "principal": row.principal,
        "resource": row.resource,
        "permission": row.permission,
        "effect": "deny" if row.deny else "allow",
        "createdAt": row.created_at.isoformat(),
        "createdBy": row.created_by,
    }


def grant(
    principal: str, resource: str, permission: str, *, deny: bool = False, by: str, audit_as: Audit
) -> dict[str, Any]:
    """Allow (or with ``deny`` refuse) ``permission`` on ``resource`` to ``principal``; a grant
    of the same principal, resource and effect is replaced."""
    who = _principal(principal, make_group=True)
    resource, permission = grants.parse_resource(resource), _permission(permission)
    row, _ = Grant.objects.update_or_create(
        **who, resource=resource, deny=deny,
        defaults={"permission": permission, "created_by": by},
    )  # fmt: skip
    audit_as("acl.deny" if deny else "acl.grant", resource, f"{row.principal} {permission}")
    return describe(row)


def revoke(principal: str, resource: str, *, deny: bool = False, audit_as: Audit) -> int:
    """Remove the grant (or with ``deny`` the denial) of ``principal`` on ``resource``; how
    many were removed (0 or 1)."""
    who = _principal(principal)
    resource = grants.parse_resource(resource)
    removed, _ = Grant.objects.filter(**who, resource=resource, deny=deny).delete()
    audit_as("acl.revoke", resource, f"{principal} ({'deny' if deny else 'allow'}): {removed}")
    return removed


def listing(principal: str = "", resource: str = "") -> list[dict[str, Any]]:
    """The grants, of ``principal`` only when given (a user's own and its groups'), and of
    resources matching ``resource`` when given."""
    rows = Grant.objects.select_related("user", "group").order_by("id")
    if principal:
        who = _principal(principal)
        if "user" in who:
            from django.db.models import Q

            user = who["user"]
            rows = rows.filter(Q(user=user) | Q(group__in=user.groups.all()))
        else:
            rows = rows.filter(group=who["group"])
    found = [describe(row) for row in rows]
    if resource:
        found = [g for g in found if grants.matches(g["resource"], resource)
                 or grants.matches(resource, g["resource"])]  # fmt: skip
    return found


def check(username: str, resource: str, permission: str) -> dict[str, Any]:
    """Whether ``username`` may do ``permission`` on ``resource`` (a resource string, not a
    pattern), and why."""
    user = _principal(f"user:{username}")["user"]
    resource, permission = grants.parse_resource(resource), _permission(permission)
    if "*" in resource:
        raise InvalidArgumentError("check a resource, not a pattern (no *)")
    verdict = grants.judge(user, resource, permission)
    return {"user": username, "resource": resource, "permission": permission,
            "allowed": verdict.allowed, "reason": verdict.reason}  # fmt: skip


def members(group: str, username: str, *, join: bool, audit_as: Audit) -> None:
    """Add ``username`` to ``group`` (made if needed) or, with ``join`` false, take it out."""
    found = _principal(f"group:{group}", make_group=join)["group"]
    user = _principal(f"user:{username}")["user"]
    (user.groups.add if join else user.groups.remove)(found)
    audit_as("acl.join" if join else "acl.leave", f"group:{group}", username)


# -- Pravega's password file ------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class PravegaPasswordHasher(BasePasswordHasher):
    """Verifies the passwords of Pravega's password file (``PasswordCreatorTool``: PBKDF2 with
    HMAC-SHA1, a random salt, a 64-byte key), kept as imported
    (``pravega$ITERATIONS$SALT$KEY``, salt and key in unpadded URL-safe base64: within the 128
    characters Django keeps a password in). Django re-hashes each with its preferred hasher at
    the user's first successful sign-in."""

    algorithm = "pravega"

    def encode(self, password: str, salt: str, iterations: int | None = None) -> str:
        rounds = iterations or 5000
        key = hashlib.pbkdf2_hmac("sha1", password.encode(), _unb64(salt), rounds, 64)
        return f"{self.algorithm}${rounds}${salt}${_b64(key)}"

    def salt(self) -> str:
        return _b64(super().salt().encode())

    def decode(self, encoded: str) -> dict[str, Any]:
        algorithm, rounds, salt, key = encoded.split("$", 3)
        return {"algorithm": algorithm, "iterations": int(rounds), "salt": salt, "hash": key}

    def verify(self, password: str, encoded: str) -> bool:
        found = self.decode(encoded)
        again = self.encode(password, found["salt"], found["iterations"])
        return hmac.compare_digest(encoded.encode(), again.encode())

    def safe_summary(self, encoded: str) -> dict[str, Any]:  # type: ignore[override]
        found = self.decode(encoded)
        return {"algorithm": found["algorithm"], "iterations": found["iterations"],
                "salt": mask_hash(found["salt"]), "hash": mask_hash(found["hash"])}  # fmt: skip

    def must_update(self, encoded: str) -> bool:
        return True


def _imported_password(field: str, line: int) -> str:
    """A Django password value for a Pravega password field (hex of ``ITER:SALT:HASH``)."""
    try:
        rounds, salt, key = bytes.fromhex(field).decode().split(":")
        stored = (f"{PravegaPasswordHasher.algorithm}${int(rounds)}"
                  f"${_b64(bytes.fromhex(salt))}${_b64(bytes.fromhex(key))}")  # fmt: skip
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidArgumentError(
            f"line {line}: the password is not one PasswordCreatorTool wrote (hex of "
            "iterations:salt:hash); plain-text passwords are not imported"
        ) from None
    if len(stored) > PASSWORD_LENGTH_MAX:
        raise InvalidArgumentError(f"line {line}: the password's salt or hash is too long")
    return stored


def import_password_file(text: str, *, by: str, audit_as: Audit) -> dict[str, int]:
    """Users and grants from Pravega's password file (``user:password:acl`` per line, the acl
    ``resource,PERMISSION;...``); a user that exists keeps its password and gets the grants.
    All or nothing: a bad line changes nothing and is named."""
    parsed = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(":")
        password, _, acl = rest.partition(":")
        if not name or not password:
            raise InvalidArgumentError(f"line {number}: expected user:password:acl")
        entries = []
        for item in filter(None, (part.strip() for part in acl.rstrip(";").split(";"))):
            resource, _, permission = item.rpartition(",")
            if permission.strip().upper() == "NONE":
                continue
            try:
                entries.append((grants.parse_resource(resource), _permission(permission)))
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"line {number}: {exc}") from None
        parsed.append((name, _imported_password(password, number), entries))
    made = granted = 0
    with transaction.atomic():
        for name, password, entries in parsed:
            user, created = get_user_model().objects.get_or_create(username=name)
            if created:
                user.password = password
                user.save(update_fields=["password"])
                made += 1
            for resource, permission in entries:
                grant(f"user:{name}", resource, permission, by=by, audit_as=audit_as)
                granted += 1
    audit_as("acl.import", "pravega password file", f"{made} users made, {granted} grants")
    return {"users": len(parsed), "usersCreated": made, "grants": granted}
