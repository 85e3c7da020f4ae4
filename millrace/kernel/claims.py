"""Delegation token claims: what a wire-protocol request's ``delegationToken`` grants.

Part of the Django-free kernel: the controller mints tokens (``mint_token``), the segment store
checks them (``TokenVerifier``), the client only carries them. A token is a JWT signed with
HS256 and a secret shared by the controller and every segment store. Claims:

* ``resource``: the segment name it covers, or a prefix ending in ``/`` (``"scope/stream/"``
  covers every segment of that stream), or ``"*"`` (everything). A token for a segment also
  covers the segments derived from it (``<segment>#transaction.…``, ``<segment>#transient.…``).
* ``access``: ``"READ"`` or ``"READ_UPDATE"`` (which includes READ).
* ``exp``: expiry, Unix seconds (required; the Pravega client reads it to refresh tokens).

Nothing here reads the environment.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import jwt

__all__ = [
    "ACCESS_LEVELS",
    "READ",
    "READ_UPDATE",
    "ROLES",
    "AuthError",
    "TokenVerifier",
    "mint_token",
    "resource_matches",
    "stream_resource",
]

READ = "READ"
READ_UPDATE = "READ_UPDATE"
#: Access levels, weakest first: a token grants its level and every weaker one.
ACCESS_LEVELS = (READ, READ_UPDATE)

#: The roles of the users of a node (``controller_app.roles`` gives them their permissions;
#: the command line offers them without Django).
Role = Literal["admin", "operator", "viewer"]
ROLES: tuple[Role, ...] = ("admin", "operator", "viewer")
_ALGORITHM = "HS256"
#: Decoded tokens kept per verifier (the signature is checked once per distinct token).
_CACHE_ENTRIES_MAX = 4096
_DERIVED_SEPARATOR = "#"


class AuthError(Exception):
    """A token does not grant the access asked for. ``expired``: it did, but has expired."""

    def __init__(self, message: str, *, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired


def mint_token(
    secret: str,
    resource: str,
    access: str,
    ttl_seconds: float,
    *,
    now: float | None = None,
) -> str:
    """A delegation token granting ``access`` to ``resource`` for ``ttl_seconds``."""
    if access not in ACCESS_LEVELS:
        raise ValueError(f"access must be one of {ACCESS_LEVELS}, not {access!r}")
    if not secret:
        raise ValueError("a token secret is required")
    if not ttl_seconds > 0:
        raise ValueError(f"the ttl must be positive seconds, not {ttl_seconds}")
    issued = time.time() if now is None else now
    claims = {
        "resource": resource,
        "access": access,
        "iat": int(issued),
        "exp": int(issued + ttl_seconds),
    }
    return jwt.encode(claims, secret, algorithm=_ALGORITHM)


def stream_resource(scope: str, stream: str) -> str:
    """The ``resource`` claim that covers every segment of ``scope/stream``."""
    return f"{scope}/{stream}/"


def resource_matches(granted: str, segment: str) -> bool:
    """Whether a token's ``resource`` claim covers ``segment``."""
    if granted == "*" or granted == segment:
        return True
    if granted.endswith("/"):
        return segment.startswith(granted)
    return bool(granted) and segment.startswith(granted + _DERIVED_SEPARATOR)


class TokenVerifier:
    """Checks delegation tokens against a shared secret, with an injectable clock."""

    def __init__(self, secret: str, *, clock: Callable[[], float] = time.time) -> None:
        if not secret:
            raise ValueError(
                "authentication is on but no token secret is set "
                "(set MILLRACE_TOKEN_SECRET, or MILLRACE_AUTH=off to disable authentication)"
            )
        self._secret = secret
        self._clock = clock
        self._cache: dict[str, Mapping[str, Any]] = {}

    def check(self, token: str, resource: str, access: str) -> None:
        claims = self._claims(token)
        if claims["exp"] <= self._clock():
            raise AuthError("delegation token has expired", expired=True)
        granted = claims["access"]
        if ACCESS_LEVELS.index(granted) < ACCESS_LEVELS.index(access):
            raise AuthError(f"token grants {granted}, {access} is needed")
        if not resource_matches(claims["resource"], resource):
            raise AuthError(f"token does not cover segment {resource!r}")

    def _claims(self, token: str) -> Mapping[str, Any]:
        if not token:
            raise AuthError("a delegation token is required")
        claims = self._cache.get(token)
        if claims is None:
            claims = self._decode(token)
            if len(self._cache) >= _CACHE_ENTRIES_MAX:
                self._cache.clear()
            self._cache[token] = claims
        return claims

    def _decode(self, token: str) -> Mapping[str, Any]:
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[_ALGORITHM],
                options={"verify_exp": False, "require": ["exp", "resource", "access"]},
            )
        except jwt.InvalidTokenError as exc:
            raise AuthError(f"invalid delegation token: {exc}") from None
        if not isinstance(claims.get("exp"), int | float):
            raise AuthError("invalid delegation token: bad exp claim")
        if claims.get("access") not in ACCESS_LEVELS or not isinstance(claims["resource"], str):
            raise AuthError("invalid delegation token: bad access or resource claim")
        return claims
