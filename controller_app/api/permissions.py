"""The REST API's permission: the caller's grants (``controller_app.access.grants``) must allow the
call on the resource its path names, or, for the few calls that need the admin role, its role.

A view may say what each method needs (``needs = {"POST": "read"}`` for a POST that only
reads); otherwise GET, HEAD and OPTIONS need ``read`` and every other method ``operate``.
``read`` asks ``READ`` of the resource, ``operate`` ``READ_UPDATE``, or ``MANAGE`` for the
changes ``grants.MANAGING`` names (by the view's ``audit_actions``). The resource is the
innermost one the path names (``resource_of``), or the view's own (``grant_resource(request)``,
a create's object is in its body). A listing view (``listing = {"GET"}``) lets in whoever may
see anything and leaves out of its answer what the caller may not see.

A refused caller gets 403 ``permission-denied`` naming the resource and the permission it
lacks (or the role); one with no credentials gets 401.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission

from controller_app.access import grants
from controller_app.access.roles import Need, may, refusal


def need_of(view: Any, method: str) -> Need:
    named: dict[str, Need] = getattr(view, "needs", {})
    return named.get(method) or ("read" if method in SAFE_METHODS else "operate")


def grant_of(view: Any, request: Any) -> tuple[str, str]:
    """(resource, permission) a request asks for."""
    method = request.method
    need = need_of(view, method)
    action = getattr(view, "audit_actions", {}).get(method)
    permission = grants.permission_of(action, reads=need == "read")
    own = getattr(view, "grant_resource", None)
    resource = own(request) if own is not None else grants.resource_of(view.kwargs)
    return resource, permission


class RolePermission(BasePermission):
    def has_permission(self, request: Any, view: Any) -> bool:
        need = need_of(view, request.method)
        if need == "admin":
            if may(request.user, need):
                return True
            self.message = refusal(need)
            return False
        if request.method in getattr(view, "listing", ()):
            if grants.may_list(request.user):
                return True
            self.message = grants.NOTHING_VISIBLE
            return False
        resource, permission = grant_of(view, request)
        verdict = grants.judge(request.user, resource, permission)
        if verdict.allowed:
            return True
        self.message = str(grants.PermissionRefusedError(resource, permission, verdict.reason))
        return False
