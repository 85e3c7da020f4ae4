"""The console's Security page: TLS, the delegation-token secrets, users, API tokens and
sign-ins.

Everyone who may read sees it (fingerprints and key prefixes, never a secret); the changes
(rotating the token secret; a user's role, password, state or deletion; rotating or revoking a
user's API token; unlocking a user and address refused for too many failed sign-ins) need the
admin role, each audited under the names the command line's are (``token-secret.rotate``,
``user.role``, ``token.rotate`` ...).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from axes.models import AccessAttempt
from axes.utils import reset
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from admin_ui.console import change, context, done, page
from controller_app import audit
from controller_app import selectors as sel
from controller_app.access import users as accounts
from controller_app.access.tokens import token_keys
from controller_app.access.users import api_tokens, revoke_token, rotate_token
from controller_app.errors import InvalidArgumentError

#: A certificate that ends within this many days is shown as a warning.
CERTIFICATE_WARNING_DAYS = 14


def certificate(path: str | None) -> dict[str, Any] | None:
    """What the certificate file ``path`` says: subject, names, end and days left."""
    if not path:
        return None
    from cryptography import x509

    try:
        with open(path, "rb") as handle:
            cert = x509.load_pem_x509_certificate(handle.read())
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        listed = [str(getattr(n, "value", n)) for n in names]
    except x509.ExtensionNotFound:
        listed = []
    ends = cert.not_valid_after_utc
    left = (ends - timezone.now()).total_seconds() / 86400
    return {
        "subject": cert.subject.rfc4514_string(),
        "names": listed,
        "ends": ends,
        "days_left": int(left),
        "warning": left < CERTIFICATE_WARNING_DAYS,
    }


def _locked() -> list[dict[str, Any]]:
    """The users and addresses refused now for too many failed sign-ins."""
    limit = settings.AXES_FAILURE_LIMIT
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    found = []
    for attempt in AccessAttempt.objects.filter(
        failures_since_start__gte=limit, attempt_time__gte=since
    ).order_by("-attempt_time")[:50]:
        found.append({
            "username": attempt.username, "address": attempt.ip_address,
            "failures": attempt.failures_since_start,
            "until": attempt.attempt_time + settings.AXES_COOLOFF_TIME,
        })  # fmt: skip
    return found


@page
def security(request: HttpRequest) -> HttpResponse:
    tls = settings.MILLRACE_TLS
    node = settings.MILLRACE
    keys = token_keys().describe()
    for key in keys["retiring"]:
        key["until"] = dt.datetime.fromtimestamp(key["until"], dt.UTC)
    values = context(
        request,
        tls=tls,
        certificate=certificate(tls.cert_file) if tls.enabled else None,
        nodes=sel.segment_store_nodes().order_by("node_id"),
        keys=keys,
        token_ttl_s=node.token_ttl_seconds,
        overlap_default=2 * node.token_ttl_seconds,
        users=accounts.users(),
        roles=accounts.ROLES,
        tokens=api_tokens(),
        api_token_ttl_days=node.api_token_ttl_days,
        signin_limit=settings.AXES_FAILURE_LIMIT if settings.AXES_ENABLED else None,
        lockout_s=node.signin_lockout_s,
        locked=_locked(),
    )
    return render(request, "admin_ui/security.html", values)


def _back() -> str:
    return reverse("console:security")


@change("token-secret.rotate", need="admin")
def secret_rotate(request: HttpRequest) -> HttpResponse:
    try:
        overlap = float(request.POST.get("overlap", "").strip())
    except ValueError:
        raise InvalidArgumentError("the overlap must be a number of seconds") from None
    if not 0 <= overlap <= 7 * 86400:
        raise InvalidArgumentError("the overlap must be from 0 to 604800 seconds")
    keys = token_keys()
    old = keys.describe()["signing"]
    new = keys.rotate(overlap)
    audit.name_object(request, new)
    return done(
        request, f"token secret rotated: {new} signs now; {old} verifies {overlap:g} s more",
        _back(),
    )  # fmt: skip


@change("token.rotate", need="admin")
def token_rotate(request: HttpRequest, user: str) -> HttpResponse:
    audit.name_object(request, user)
    try:
        token = rotate_token(user)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    return done(request, f"new API token of {user} (shown once; copy it now): {token}", _back())


@change("token.revoke", need="admin")
def token_revoke(request: HttpRequest, user: str) -> HttpResponse:
    audit.name_object(request, user)
    try:
        revoke_token(user)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    return done(request, f"the API token of {user} is revoked", _back())


@change("signin.unlock", need="admin")
def signin_unlock(request: HttpRequest) -> HttpResponse:
    username = request.POST.get("username", "").strip()
    address = request.POST.get("address", "").strip()
    audit.name_object(request, f"{username}@{address}")
    reset(ip=address or None, username=username or None)
    return done(request, f"{username} may sign in from {address} again", _back())


def _by_change(action: str, obj: str, detail: str = "") -> None:
    """(``change`` records the console's changes in the audit log itself.)"""


def _user_change(request: HttpRequest, user: str, make: Any) -> HttpResponse:
    audit.name_object(request, user)
    try:
        said = make()
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    return done(request, said, _back())


@change("user.role", need="admin")
def user_role(request: HttpRequest, user: str) -> HttpResponse:
    role = request.POST.get("role", "")

    def make() -> str:
        accounts.set_role(user, role, _by_change)
        return f"{user} is {role} now"

    return _user_change(request, user, make)


@change("user.password", need="admin")
def user_password(request: HttpRequest, user: str) -> HttpResponse:
    return _user_change(request, user, lambda: (
        f"new console password of {user} (shown once; copy it now): "
        f"{accounts.new_password(user, _by_change)}"
    ))  # fmt: skip


def _set_active(request: HttpRequest, user: str, active: bool) -> HttpResponse:
    def make() -> str:
        accounts.set_active(user, active, _by_change)
        return f"{user} is {'enabled' if active else 'disabled'}"

    return _user_change(request, user, make)


@change("user.disable", need="admin")
def user_disable(request: HttpRequest, user: str) -> HttpResponse:
    return _set_active(request, user, False)


@change("user.enable", need="admin")
def user_enable(request: HttpRequest, user: str) -> HttpResponse:
    return _set_active(request, user, True)


@change("user.delete", need="admin")
def user_delete(request: HttpRequest, user: str) -> HttpResponse:
    def make() -> str:
        accounts.delete_user(user, _by_change)
        return f"{user} is deleted"

    return _user_change(request, user, make)


@change("user.create", need="admin")
def user_create(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("username", "").strip()
    role = request.POST.get("role", "")
    audit.name_object(request, name)
    try:
        password, token = accounts.create_user(name, role, _by_change)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    return done(request, f"user {name} ({role}) made; shown once, copy them now: console "
                f"password {password}, API token {token}", _back())  # fmt: skip
