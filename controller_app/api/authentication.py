"""API tokens: ``Authorization: Token <key>`` (DRF's scheme) or ``Authorization: Bearer <key>``;
Basic credentials with sign-in limits; a delegation token for ``*`` on the scrape views."""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import (
    BaseAuthentication,
    BasicAuthentication,
    TokenAuthentication,
    get_authorization_header,
)

from controller_app.access.signin import lockout
from controller_app.access.tokens import TokenExpiredError, token_keys, user_of
from millrace.kernel.claims import READ, AuthError, TokenVerifier


class TooManySignInsError(exceptions.Throttled):
    """A user and address refused for too many failed sign-ins (429, ``Retry-After``)."""

    default_code = "too-many-sign-ins"


#: How long a verified Basic credential is taken without hashing the password again, and how
#: many are remembered at most.
VERIFIED_SECONDS = 300.0
VERIFIED_MAX = 10_000
#: The key of this process's memory of verified credentials (never the password itself).
_VERIFIED_KEY = secrets.token_bytes(32)
_verified: dict[bytes, tuple[int, str, float]] = {}


class LimitedBasicAuthentication(BasicAuthentication):
    """DRF's Basic authentication under the sign-in limit (``controller_app.access.signin``): a user
    and address over it are answered 429 saying until when, not "invalid password".

    Programs send Basic credentials with every request (Confluent's schema registry clients
    do), and checking a password costs Django's whole key stretching (half a second here).
    So a credential that was verified is remembered for ``VERIFIED_SECONDS``, by an HMAC of
    it under a key of this process: while the user is active and its password hash is the
    one it was verified against, it is taken without hashing again. A changed password, a
    disabled user or a restart ends it; roles are checked afresh on every request."""

    def authenticate_credentials(self, userid: str, password: str, request: Any = None) -> Any:
        key = hmac.new(_VERIFIED_KEY, f"{userid}\0{password}".encode(), hashlib.sha256).digest()
        known = _verified.get(key)
        if known is not None and known[2] > time.monotonic():
            user = get_user_model().objects.filter(pk=known[0], is_active=True).first()
            if user is not None and user.password == known[1]:
                return user, None
        try:
            user, auth = super().authenticate_credentials(userid, password, request)
        except exceptions.AuthenticationFailed:
            if request is None or not getattr(request, "axes_locked_out", False):
                raise
            message, seconds = lockout(request)
            raise TooManySignInsError(wait=seconds, detail=message) from None
        if len(_verified) >= VERIFIED_MAX:
            _verified.clear()
        _verified[key] = (user.pk, user.password, time.monotonic() + VERIFIED_SECONDS)
        return user, auth


KEYWORDS = (b"token", b"bearer")


class BearerOrTokenAuthentication(TokenAuthentication):
    """DRF's token authentication that also accepts the ``Bearer`` keyword."""

    def authenticate(self, request: Any) -> Any:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in KEYWORDS:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "invalid Authorization header: expected 'Token <key>' or 'Bearer <key>'"
            )
        try:
            key = parts[1].decode("ascii")
        except UnicodeError:
            raise exceptions.AuthenticationFailed("the token has characters no token has") from None
        return self.authenticate_credentials(key)

    def authenticate_credentials(self, key: str) -> Any:
        """DRF's check, and the token's expiry (``MILLRACE_API_TOKEN_TTL_DAYS``)."""
        try:
            user = user_of(key)
        except TokenExpiredError as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        if user is None:
            raise exceptions.AuthenticationFailed("invalid token (revoked, rotated or mistyped)")
        return user, key


class LimitedBasicScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """How the API schema describes ``LimitedBasicAuthentication``: HTTP Basic (without it,
    drf-spectacular warns once per view, each time the schema is made)."""

    target_class = LimitedBasicAuthentication
    name = "basicAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "basic"}


class ScrapeTokenAuthentication(BaseAuthentication):
    """A delegation token for ``*`` (``millrace mint-token --access READ "*"``) as
    ``Authorization: Bearer <token>``: the one credential Prometheus needs for every port of a
    cluster (the segment stores', workers' and beat's check the same). Only the views that
    name it take it (``/metrics``, ``/v1/metrics/targets``); anything else is left to the
    other classes (an API token has no dots)."""

    def authenticate(self, request: Any) -> Any:
        parts = get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower() != b"bearer" or parts[1].count(b".") != 2:
            return None
        if not settings.MILLRACE.auth_enabled:
            return None
        try:
            _scrape_verifier().check(parts[1].decode("ascii"), "*", READ)
        except (AuthError, UnicodeError) as exc:
            raise exceptions.AuthenticationFailed(f"not a delegation token for *: {exc}") from None
        return AnonymousUser(), SCRAPE

    def authenticate_header(self, request: Any) -> str:
        return "Bearer"


#: ``request.auth`` of a caller authenticated by ``ScrapeTokenAuthentication``.
SCRAPE = "scrape"


@functools.cache
def _scrape_verifier() -> TokenVerifier:
    return TokenVerifier(token_keys())


class ScrapeTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """How the API schema describes ``ScrapeTokenAuthentication``: a bearer token."""

    target_class = ScrapeTokenAuthentication
    name = "scrapeToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "delegation token for *"}
