"""Roles: who may do what, for the REST API and the console alike.

Three Django groups carry the permissions (made after every ``migrate`` by ``ensure_roles``):

* ``viewer``: reads everything (the ``view_*`` permissions of the controller's models);
* ``operator``: also changes scopes, streams, reader groups and transactions, and appends;
* ``admin``: everything, users and tokens included (``is_staff`` opens the Django admin).

A superuser may do everything. A user in no group may do nothing. With authentication off
(``MILLRACE_AUTH=false``) every caller may do everything.
"""

from __future__ import annotations

from typing import Any, Literal

from django.conf import settings

from millrace.kernel.claims import ROLES, Role

#: What a request needs: ``read`` (viewer), ``operate`` (operator) or ``admin``.
Need = Literal["read", "operate", "admin"]

#: The permission each need is checked by.
_PERMISSION: dict[str, str] = {
    "read": "controller_app.view_stream",
    "operate": "controller_app.change_stream",
    "admin": "auth.change_user",
}
_APPS_BY_ROLE = {"viewer": ("controller_app",), "operator": ("controller_app",)}


def may(user: Any, need: Need) -> bool:
    """Whether ``user`` (a Django user, possibly anonymous) may do what ``need`` names."""
    if not settings.MILLRACE.auth_enabled:
        return True
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    return bool(user.is_superuser or user.has_perm(_PERMISSION[need]))


def role_of(user: Any) -> str:
    """The strongest role ``user`` holds ('' for none): what the console shows."""
    for role in ROLES:
        if may_as(user, role):
            return role
    return ""


def may_as(user: Any, role: Role) -> bool:
    return may(user, {"admin": "admin", "operator": "operate", "viewer": "read"}[role])  # type: ignore[arg-type]


def refusal(need: Need) -> str:
    """The message a refused caller reads."""
    wanted = {"read": "the viewer role", "operate": "the operator role", "admin": "the admin role"}
    return f"this needs {wanted[need]} or a stronger one"


def ensure_roles(**kwargs: Any) -> None:
    """Make the three groups and give them their permissions (idempotent; ``post_migrate``)."""
    from django.contrib.auth.models import Group, Permission

    everything = Permission.objects.all()
    controller = everything.filter(content_type__app_label="controller_app")
    groups = {
        "viewer": controller.filter(codename__startswith="view_"),
        "operator": controller,
        "admin": everything,
    }
    for name, permissions in groups.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(permissions)


def grant(user: Any, role: Role) -> None:
    """Put ``user`` in the group of ``role`` (and only that one); an admin is also staff."""
    from django.contrib.auth.models import Group

    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    ensure_roles()
    user.groups.set([Group.objects.get(name=role)])
    if user.is_staff != (role == "admin"):
        user.is_staff = role == "admin"
        user.save(update_fields=["is_staff"])
