"""Every API error as JSON ``{"code": "<stable code>", "message": "<what and why>"}``.

``exception_handler`` is DRF's ``EXCEPTION_HANDLER``: controller errors map to their HTTP
status and code, DRF's own (validation, authentication, permission, parse, method) keep their
status with a stable code, segment store failures and timeouts are 503 with ``Retry-After``
(the segment store is away or restarting: ask again), and so is a metadata database or broker
that is away (``database-unavailable``, ``broker-unavailable``: ``controller_app.outages``);
anything else is 500 with a short message (the traceback goes to the log, never to the client).
``bad_request``, ``not_found`` and ``server_error`` are Django's 400/404/500 handlers for
paths outside DRF views (JSON for the API paths); ``bad_request`` answers a body over the
size limit with 413, ``server_error`` a service that is away with 503 (the console's pages, a
middleware that reads the session).
"""

from __future__ import annotations

import logging
import math
import sys
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views import defaults
from rest_framework import exceptions as drf
from rest_framework.response import Response

from controller_app import errors as ce
from controller_app import outages
from controller_app.api import is_api_path
from controller_app.api.authentication import TooManySignInsError
from controller_app.api.fields import BodyTooLargeError, body_limit_message
from controller_app.outcomes import INTERNAL, SERVICE_AWAY_SECONDS, outcome_of

log = logging.getLogger(__name__)

_DRF = [
    (drf.NotAuthenticated, "not-authenticated"),
    (drf.AuthenticationFailed, "authentication-failed"),
    (drf.PermissionDenied, "permission-denied"),
    (drf.ParseError, "malformed-request"),
    (BodyTooLargeError, "request-too-large"),
    (drf.UnsupportedMediaType, "unsupported-media-type"),
    (drf.MethodNotAllowed, "method-not-allowed"),
    (drf.NotAcceptable, "not-acceptable"),
    (drf.NotFound, "not-found"),
    (TooManySignInsError, "too-many-sign-ins"),
    (drf.Throttled, "throttled"),
    (drf.ValidationError, "invalid-argument"),
]


def error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response({"code": code, "message": message}, status=status, headers=headers)


def _validation_message(detail: Any, prefix: str = "") -> str:
    if isinstance(detail, dict):
        parts = [_validation_message(v, f"{prefix}{k}: ") for k, v in detail.items()]
        return "; ".join(parts)
    if isinstance(detail, list):
        return "; ".join(_validation_message(v, prefix) for v in detail)
    return f"{prefix}{detail}"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    down = outages.service_down(exc)
    if down is not None:
        log.warning("%s: %s (%s)", context.get("view"), down[0], type(exc).__name__)
        return error(503, *down, {"Retry-After": str(SERVICE_AWAY_SECONDS)})
    if isinstance(exc, Http404):
        return error(404, "not-found", str(exc) or "not found")
    if isinstance(exc, RequestDataTooBig):
        return error(413, "request-too-large", body_limit_message())
    for cls, code in _DRF:
        if isinstance(exc, cls):
            headers = {}
            auth_header = getattr(exc, "auth_header", None)
            if auth_header:
                headers["WWW-Authenticate"] = auth_header
            refused: Any = exc  # (a DRF APIException of ``cls``)
            if getattr(refused, "wait", None):
                headers["Retry-After"] = str(math.ceil(refused.wait))
            message = _validation_message(refused.detail)
            return error(refused.status_code, code, message, headers)
    outcome = outcome_of(exc)
    if outcome is None:
        log.exception("unexpected error in %s", context.get("view"))
        return error(500, INTERNAL.code, f"internal error ({type(exc).__name__}); see the log")
    if outcome.retry and not isinstance(exc, ce.ControllerError):  # (the segment store's own)
        log.warning("segment store unavailable: %s", exc)
    retry = {"Retry-After": str(outcome.retry_after)} if outcome.retry_after else None
    return error(outcome.http, outcome.code, outcome.say(exc), retry)


def _is_api(request: HttpRequest) -> bool:
    return is_api_path(request.path)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(
            {"code": "not-found", "message": f"no such path: {request.path}"}, status=404
        )
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 400 handler: a body over the size limit (which Django takes for a suspicious
    request) is 413 naming the limit; anything else is Django's 400."""
    if isinstance(exception, RequestDataTooBig):
        body = {"code": "request-too-large", "message": body_limit_message()}
        if _is_api(request):
            return JsonResponse(body, status=413)
        return HttpResponse(f"413 {body['message']}", status=413, content_type="text/plain")
    return defaults.bad_request(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    # Django calls this handler while it handles the exception: sys.exc_info() names it.
    down = outages.service_down(sys.exc_info()[1] or Exception())
    if down is not None:
        return service_down_response(request, *down)
    if _is_api(request):
        body = {"code": "internal-error", "message": "internal error; see the log"}
        return JsonResponse(body, status=500)
    return defaults.server_error(request)


def service_down_response(request: HttpRequest, code: str, message: str) -> HttpResponse:
    """503 with ``Retry-After``: JSON for the API paths, a short page for the console."""
    if _is_api(request):
        response: HttpResponse = JsonResponse({"code": code, "message": message}, status=503)
    else:
        response = render(request, "service_unavailable.html", {"code": code, "message": message},
                          status=503)  # fmt: skip
    response["Retry-After"] = str(SERVICE_AWAY_SECONDS)
    return response


def add_error_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: every operation's ``default`` response is the
    error shape, so clients (and schemathesis) know what a 4xx/5xx body looks like."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Stable, machine-readable code."},
            "message": {"type": "string", "description": "What went wrong and why."},
        },
        "required": ["code", "message"],
    }
    error = {
        "description": "An error (4xx/5xx): JSON with a stable code and a message.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    for methods in result.get("paths", {}).values():
        for operation in methods.values():
            if isinstance(operation, dict) and "responses" in operation:
                operation["responses"].setdefault("default", error)
    return result
