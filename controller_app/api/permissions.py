"""The REST API's permission: the caller's role (``controller_app.roles``) must allow the call.

A view may say what each method needs (``needs = {"POST": "read"}`` for a POST that only
reads); otherwise GET, HEAD and OPTIONS need ``read`` and every other method ``operate``.
A refused caller gets 403 ``permission-denied`` with the role it lacks; one with no
credentials gets 401.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission

from controller_app.roles import Need, may, refusal


def need_of(view: Any, method: str) -> Need:
    named: dict[str, Need] = getattr(view, "needs", {})
    return named.get(method) or ("read" if method in SAFE_METHODS else "operate")


class RolePermission(BasePermission):
    def has_permission(self, request: Any, view: Any) -> bool:
        need = need_of(view, request.method)
        if may(request.user, need):
            return True
        self.message = refusal(need)
        return False
