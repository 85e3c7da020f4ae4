"""API tokens: ``Authorization: Token <key>`` (DRF's scheme) or ``Authorization: Bearer <key>``."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header

from controller_app.tokens import TokenExpiredError, user_of

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
