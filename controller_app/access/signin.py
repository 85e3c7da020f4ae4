"""Sign-ins on the open network: each failure and each lockout in the audit log, and the
answer to a user and address refused for too many failures.

django-axes counts the failures (``AXES_*`` in the settings, from ``MILLRACE_SIGNIN_*``) of the
console's sign-in form, the Django admin's and REST Basic authentication, per user name and
client address; ``locked_out`` is what it answers then: the console's page saying until when,
or, for the REST API, the API's JSON error; both 429 with ``Retry-After``.
"""

from __future__ import annotations

import math
from typing import Any

from axes.helpers import get_cool_off
from axes.signals import user_locked_out
from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from controller_app.api import is_api_path
from controller_app.audit import client_address, record, source_of
from controller_app.models import AuditEntry

__all__ = ["locked_out", "lockout"]


def _audit(action: str, username: str, request: HttpRequest | None, detail: str) -> None:
    record(
        action, username or "", username=username or "",
        source=source_of(request) if request is not None else AuditEntry.Source.CONSOLE,
        address=client_address(request) if request is not None else "",
        result=AuditEntry.Result.REFUSED, detail=detail,
    )  # fmt: skip


@receiver(user_login_failed)
def _failed(sender: Any, credentials: dict[str, Any], request: Any = None, **kw: Any) -> None:
    if request is not None and getattr(request, "axes_locked_out", False):
        return  # (the lockout's own row says it)
    _audit("signin.failed", str(credentials.get("username", "")), request, "wrong user or password")


@receiver(user_locked_out)
def _locked(sender: Any, request: Any, username: str | None, ip_address: str, **kw: Any) -> None:
    _audit("signin.locked", username or "", request, f"too many failed sign-ins from {ip_address}")


def lockout(request: Any) -> tuple[str, int]:
    """(what to say, seconds to wait) to a user and address refused for too many failures."""
    from django.conf import settings

    cool_off = get_cool_off(request)
    seconds = max(1, math.ceil(cool_off.total_seconds())) if cool_off else 0
    limit = settings.AXES_FAILURE_LIMIT
    message = (
        f"too many failed sign-ins ({limit}) for this user from this address: sign-in is "
        f"refused for {_duration(seconds)}, then try again (or ask an administrator)"
    )
    return message, seconds


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any
) -> HttpResponse:
    """Axes' answer to a sign-in of a user and address over the failure limit."""
    message, seconds = lockout(request)
    if is_api_path(request.path):
        response: HttpResponse = JsonResponse(
            {"code": "too-many-sign-ins", "message": message}, status=429
        )
    else:
        context = {"message": message, "seconds": seconds}
        response = render(request, "registration/locked_out.html", context, status=429)
    response["Retry-After"] = str(seconds)
    return response


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} seconds"
    return f"{math.ceil(seconds / 60)} minutes"
