"""The console's Access page: grants on resources (``controller_app.access.acl``), each user's and
group's, given, denied, revoked and checked; a group's members; Pravega's password file
imported.

Whoever may read the whole cluster (``prn::/``) sees it; the changes need the admin role, each
audited under the names ``/v1/acl`` and ``millrace acl`` use (``acl.grant``, ``acl.revoke`` ...).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.models import Group
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from admin_ui.console import change, context, done, page
from controller_app.access import acl, grants
from controller_app.errors import InvalidArgumentError, NotFoundError


def _unaudited(action: str, obj: str, detail: str) -> None:
    """Console changes are audited by the middleware (one row per request)."""


@page
def access(request: HttpRequest) -> HttpResponse:
    principal = request.GET.get("principal", "").strip()
    try:
        listed = acl.listing(principal)
    except (InvalidArgumentError, NotFoundError) as exc:
        messages.error(request, str(exc))
        listed = []
    checked: dict[str, Any] | None = None
    if request.GET.get("check_user"):
        try:
            checked = acl.check(request.GET["check_user"].strip(),
                                request.GET.get("check_resource", "").strip(),
                                request.GET.get("check_permission", grants.READ))  # fmt: skip
        except (InvalidArgumentError, NotFoundError) as exc:
            messages.error(request, str(exc))
    groups = [
        {"name": g.name, "members": sorted(u.username for u in g.user_set.all())}
        for g in Group.objects.order_by("name").prefetch_related("user_set")
    ]
    values = context(
        request, grants=listed, principal=principal, groups=groups,
        permissions=grants.PERMISSIONS, checked=checked,
    )  # fmt: skip
    return render(request, "admin_ui/access.html", values)


def _back() -> str:
    return reverse("console:access")


@change("acl.grant", need="admin")
def grant(request: HttpRequest) -> HttpResponse:
    deny = request.POST.get("effect") == "deny"
    row = acl.grant(
        request.POST.get("principal", ""), request.POST.get("resource", ""),
        request.POST.get("permission", ""), deny=deny, by=request.user.get_username(),
        audit_as=_unaudited,
    )  # fmt: skip
    text = f"{row['effect']} {row['principal']} {row['permission']} on {row['resource']}"
    return done(request, text, _back())


@change("acl.revoke", need="admin")
def revoke(request: HttpRequest) -> HttpResponse:
    form = request.POST
    removed = acl.revoke(form.get("principal", ""), form.get("resource", ""),
                         deny=form.get("effect") == "deny", audit_as=_unaudited)  # fmt: skip
    return done(request, f"{removed} grant removed", _back())


@change("acl.members", need="admin")
def members(request: HttpRequest) -> HttpResponse:
    join = request.POST.get("action") != "leave"
    group, user = request.POST.get("group", "").strip(), request.POST.get("user", "").strip()
    acl.members(group, user, join=join, audit_as=_unaudited)
    return done(request, f"{user} {'joined' if join else 'left'} {group}", _back())


@change("acl.import", need="admin")
def pravega_import(request: HttpRequest) -> HttpResponse:
    upload = request.FILES.get("file")
    text = (
        upload.read().decode("utf-8", errors="replace") if upload else request.POST.get("text", "")
    )
    found = acl.import_password_file(text, by=request.user.get_username(), audit_as=_unaudited)
    message = (f"imported {found['users']} users ({found['usersCreated']} made), "
               f"{found['grants']} grants")  # fmt: skip
    return done(request, message, _back())
