"""Writing the audit log (``models.AuditEntry``): every change, allowed or refused.

* REST and console requests: ``AuditMiddleware`` writes one row for each request that
  changes something (any method but GET, HEAD and OPTIONS) whose view names its action
  (``audit_actions = {"POST": "stream.scale"}`` on a REST view, ``audit_action`` on a
  console view), and one for every refused request whatever its view and method (401, 403
  and 429: a bad, expired or revoked token too, a sign-in over the limit). The result comes
  from the status code; the detail from the error body.
* Sign-ins: each failure and each lockout (``controller_app.access.signin``).
* The local CLI (``millrace user create``, ``token create``) and the background workflows
  (auto-scaling, retention) call ``record`` themselves.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from controller_app.api import is_api_path
from controller_app.models import AuditEntry

log = logging.getLogger(__name__)

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
#: The answers that refuse a caller: no or bad credentials, no permission, too many sign-ins.
REFUSALS = (401, 403, 429)
#: The URL parameters that name the object of a change, in the order they nest.
OBJECT_PARTS = (
    "scope", "stream", "reader_group", "kvtable", "txn_id", "checkpoint", "reader", "key",
    "subject", "version",
)  # fmt: skip


def record(
    action: str,
    obj: str,
    *,
    username: str,
    source: str,
    address: str = "",
    result: str = AuditEntry.Result.OK,
    detail: str = "",
) -> None:
    """Write one audit row; a failure to write it is logged, never raised (the change it
    describes has already happened or been refused)."""
    try:
        AuditEntry.objects.create(
            action=action[:64], object=obj[:512], username=username[:150], source=source,
            address=address[:64], result=result, detail=detail[:4000],
        )  # fmt: skip
    except Exception:
        log.exception("could not write the audit row for %s %s", action, obj)


def name_object(request: Any, *parts: str) -> None:
    """Say what a request created (``scope/stream``), for its audit row: a create's object is
    in its body, not its path. ``request`` is Django's or DRF's request."""
    target = getattr(request, "_request", request)
    target.audit_object = "/".join(parts)


def object_of(kwargs: dict[str, Any]) -> str:
    """``scope/stream/...`` from a resolved URL's parameters."""
    return "/".join(str(kwargs[k]) for k in OBJECT_PARTS if kwargs.get(k) not in (None, ""))


def client_address(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR") or "")


def _action(request: HttpRequest) -> str | None:
    match = request.resolver_match
    if match is None:
        return None
    view = getattr(match.func, "view_class", None) or match.func
    named = getattr(view, "audit_actions", None)
    if isinstance(named, dict):
        return named.get(request.method)
    return getattr(view, "audit_action", None)


def _detail(response: HttpResponse) -> str:
    data = getattr(response, "data", None)
    if data is None and response.get("Content-Type", "").startswith("application/json"):
        try:
            data = json.loads(response.content)
        except ValueError:
            data = None
    if isinstance(data, dict) and "message" in data:
        return f"{data.get('code', data.get('error_code', ''))}: {data['message']}"
    return str(getattr(response, "audit_detail", "") or f"HTTP {response.status_code}")


def source_of(request: HttpRequest) -> str:
    """Who made the request: the console, the CLI (its user agent) or a REST client."""
    if not is_api_path(request.path):
        return AuditEntry.Source.CONSOLE
    if str(request.META.get("HTTP_USER_AGENT", "")).startswith("millrace-cli"):
        return AuditEntry.Source.CLI
    return AuditEntry.Source.REST


class AuditMiddleware:
    """Writes the audit row of each changing request after its view has answered."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        status = response.status_code
        refused = status in REFUSALS
        if request.method in SAFE_METHODS and not refused:
            return response
        # A console change that failed answers with a redirect back to its page, marked here.
        failure = getattr(response, "audit_failure", None)
        action = _action(request)
        if action is None and not refused:
            return response
        if action is None:
            action = f"{request.method} {request.path}"
        result = (
            AuditEntry.Result.REFUSED
            if refused
            else AuditEntry.Result.OK
            if status < 400 and failure is None
            else AuditEntry.Result.UNCHANGED
            if status == 409 and _detail(response).startswith("already-exists:")
            else AuditEntry.Result.FAILED
        )  # (UNCHANGED: a create asked again, as Pravega's clients do; nothing went wrong)
        user = getattr(request, "user", None)
        match = request.resolver_match
        named = getattr(request, "audit_object", None)  # what a create made (set by the view)
        record(
            action,
            named or (object_of(match.kwargs) if match else ""),
            username=user.get_username() if user is not None and user.is_authenticated else "",
            source=source_of(request),
            address=client_address(request),
            result=result,
            detail="" if result == AuditEntry.Result.OK else failure or _detail(response),
        )
        return response
