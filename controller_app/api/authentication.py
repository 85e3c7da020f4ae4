"""API tokens: ``Authorization: Token <key>`` (DRF's scheme) or ``Authorization: Bearer <key>``."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header

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
