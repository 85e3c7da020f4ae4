"""What every console view shares: sign-in and grant checks, errors worded as the REST API
words them, pagination, and URLs that keep a page's browsing state.

* ``page``: a GET page; signed-in users only (else to ``/login/``), allowed READ on the
  resource its URL names (``controller_app.access.grants``; ``prn::/`` for a page that names none),
  else a 403 page naming the resource and the permission missing. ``page(listing=True)``:
  a page that lists only what its user may see lets in whoever may see anything;
  ``page(resource=...)`` names its resource. ``reading_post`` is ``page`` for a POST that
  only reads (a form answered on its own page).
* ``change(action, need)``: a POST that changes something; READ_UPDATE on the resource its URL
  names, or MANAGE for the changes ``grants.MANAGING`` names, or the admin role when ``need``
  says so (else 403, which the audit middleware writes down as refused). A controller error
  becomes a message on the page it came from, worded like the REST API's ``{code, message}``,
  and the audit row says it failed. ``action`` is what the audit log calls it (the REST API's
  names).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from controller_app.access import grants
from controller_app.access.roles import Need, may, refusal, role_of
from controller_app.api.errors import exception_handler
from controller_app.registry.errors import RegistryError

View = Callable[..., HttpResponse]
#: A view's own resource, from its request (a create's is in its form).
Resource = Callable[[HttpRequest], str]
#: Rows per page of every list.
PAGE_SIZE = 50


def refused(request: HttpRequest, why: str) -> HttpResponse:
    values = context(request, code="permission-denied", message=why)
    return render(request, "admin_ui/refused.html", values, status=403)


def _refusal(
    request: HttpRequest, kwargs: dict[str, Any], permission: str, resource: Resource | None
) -> str | None:
    """Why ``request`` may not do ``permission`` on its resource; None when it may."""
    where = resource(request) if resource is not None else grants.resource_of(kwargs)
    verdict = grants.judge(request.user, where, permission)
    return None if verdict.allowed else str(grants.PermissionRefusedError(
        where, permission, verdict.reason))  # fmt: skip


def page(
    view: View | None = None, *, listing: bool = False, resource: Resource | None = None
) -> Any:
    """A page (GET): signed in, allowed READ on its resource (see the module's docstring)."""

    def decorate(view: View) -> View:
        return require_GET(_reading(view, listing, resource))

    return decorate(view) if view is not None else decorate


def reading_post(view: View) -> View:
    """A POST that only reads (a form answered on its own page, not audited): as ``page``."""
    return require_POST(_reading(view, False, None))


def _reading(view: View, listing: bool, resource: Resource | None) -> View:
    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if listing:
            if not grants.may_list(request.user):
                return refused(request, grants.NOTHING_VISIBLE)
        else:
            where = resource(request) if resource is not None else grants.resource_of(kwargs)
            if not grants.reaches_into(request.user, where):  # (it lists only what it may see)
                return refused(
                    request,
                    str(
                        grants.PermissionRefusedError(
                            where,
                            grants.READ,
                            grants.judge(request.user, where, grants.READ).reason,
                        )
                    ),
                )
        return view(request, *args, **kwargs)

    return wrapped


def error_words(exc: Exception) -> tuple[int, str, str] | None:
    """``(status, code, message)`` as the REST API answers ``exc``; None for a bug."""
    if isinstance(exc, RegistryError):  # (the schema registry's: Confluent's numeric codes)
        return exc.status, str(exc.code), exc.message
    response = exception_handler(exc, {})
    if response is None or (response.status_code >= 500 and response.status_code != 503):
        return None
    return response.status_code, response.data["code"], response.data["message"]


def change(
    action: str, need: Need = "operate", resource: Resource | None = None
) -> Callable[[View], View]:
    """A change (POST) named ``action`` in the audit log; READ_UPDATE or MANAGE on its resource
    (``resource``, else the one its URL names), or ``need``: the admin role for the Security
    page's."""

    def decorate(view: View) -> View:
        @require_POST
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(back(request))
            if need == "admin" and not may(request.user, need):
                return refused(request, refusal(need))
            if need != "admin":
                permission = grants.permission_of(action, reads=need == "read")
                why = _refusal(request, kwargs, permission, resource)
                if why is not None:
                    return refused(request, why)
            try:
                return view(request, *args, **kwargs)
            except Exception as exc:
                words = error_words(exc)
                if words is None:
                    raise
                _, code, message = words
                messages.error(request, f"{code}: {message}")
                response = HttpResponseRedirect(back(request))
                response.audit_failure = f"{code}: {message}"  # type: ignore[attr-defined]
                return response

        wrapped.audit_action = action  # type: ignore[attr-defined]
        return wrapped

    return decorate


def back(request: HttpRequest, default: str = "/") -> str:
    """Where a change returns to: its form's ``next`` field, else the page it came from."""
    for candidate in (request.POST.get("next"), request.META.get("HTTP_REFERER")):
        if candidate and url_has_allowed_host_and_scheme(
            candidate, allowed_hosts={request.get_host()}
        ):
            return candidate
    return default


def done(request: HttpRequest, text: str, to: str | None = None) -> HttpResponse:
    """A change that worked: say so on the next page (POST, redirect, GET)."""
    messages.success(request, text)
    return HttpResponseRedirect(to or back(request))


def paginate(request: HttpRequest, rows: Any, size: int = PAGE_SIZE) -> Page:
    """The page of ``rows`` that the URL's ``page`` asks for (the last one if past it)."""
    return Paginator(rows, size).get_page(request.GET.get("page"))


def with_params(request: HttpRequest, **changes: Any) -> str:
    """This page's query string with ``changes`` applied (None removes a parameter): links
    that keep the filters, the sort and the position."""
    params = {k: v for k, v in request.GET.items()}
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = str(value)
    return "?" + urlencode(params) if params else "?"


def context(request: HttpRequest, **values: Any) -> dict[str, Any]:
    """Every page's context: the user's role, whether it may change what the page shows, and the
    window
    (seconds) every rate the console shows is averaged over (the traffic monitors', which
    auto-scaling decides by)."""
    match = request.resolver_match
    here = grants.resource_of(match.kwargs if match else {})
    return {
        "role": role_of(request.user),
        # (what the page's resource allows: its change buttons show only then)
        "may_operate": grants.allowed(request.user, here, grants.READ_UPDATE),
        "may_manage": grants.allowed(request.user, here, grants.MANAGE),
        "rate_window": settings.MILLRACE.autoscale_window_s,
        **values,
    }


def parse_when(text: str) -> dt.datetime | None:
    """A time a form gave (ISO 8601, ``datetime-local``), UTC unless it says otherwise."""
    try:
        found = parse_datetime(text.strip()) if text.strip() else None
    except ValueError:
        return None
    if found is not None and timezone.is_naive(found):
        found = timezone.make_aware(found, dt.UTC)
    return found
