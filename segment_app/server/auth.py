"""Delegation tokens: minting and checking the JWTs that wire-protocol requests carry.

Responsibility: decide whether a request's ``delegationToken`` grants an access to a segment.
A token is a JWT signed with HS256 and a secret shared by the controller (which mints tokens) and
every segment store (which checks them). Claims:

* ``resource``: the segment name it covers, or a prefix ending in ``/`` (``"scope/stream/"``
  covers every segment of that stream), or ``"*"`` (everything). A token for a segment also
  covers the segments derived from it (``<segment>#transaction.…``, ``<segment>#transient.…``).
* ``access``: ``"READ"`` or ``"READ_UPDATE"`` (which includes READ).
* ``exp``: expiry, Unix seconds (required; the Pravega client reads it to refresh tokens).

The server class never reads the environment; ``main_mint_token`` (the ``millrace mint-token``
CLI) and ``segment_app.server.node`` do, at the edge.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import jwt

__all__ = [
    "ACCESS_LEVELS",
    "READ",
    "READ_UPDATE",
    "AllowAll",
    "AuthError",
    "Authorizer",
    "TokenVerifier",
    "auth_enabled_from_env",
    "main_mint_token",
    "mint_token",
]

READ = "READ"
READ_UPDATE = "READ_UPDATE"
#: Access levels, weakest first: a token grants its level and every weaker one.
ACCESS_LEVELS = (READ, READ_UPDATE)
_ALGORITHM = "HS256"
#: Decoded tokens kept per verifier (the signature is checked once per distinct token).
_CACHE_ENTRIES_MAX = 4096
_DERIVED_SEPARATOR = "#"


class AuthError(Exception):
    """A token does not grant the access asked for. ``expired``: it did, but has expired."""

    def __init__(self, message: str, *, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired


class Authorizer(Protocol):
    def check(self, token: str, resource: str, access: str) -> None:
        """Raise AuthError unless ``token`` grants ``access`` to segment ``resource``."""


class AllowAll:
    """The authorizer used when authentication is off: everything is allowed."""

    def check(self, token: str, resource: str, access: str) -> None:
        return None


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
    issued = time.time() if now is None else now
    claims = {
        "resource": resource,
        "access": access,
        "iat": int(issued),
        "exp": int(issued + ttl_seconds),
    }
    return jwt.encode(claims, secret, algorithm=_ALGORITHM)


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


def auth_enabled_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """False only when ``MILLRACE_AUTH`` says off (off, false, 0, no); on by default."""
    value = (os.environ if environ is None else environ).get("MILLRACE_AUTH", "on")
    return value.strip().lower() not in {"off", "false", "0", "no"}


def main_mint_token(argv: Sequence[str] | None = None) -> int:
    """``millrace mint-token``: print a delegation token.

    The secret is ``--secret``, else ``MILLRACE_TOKEN_SECRET``, else the one persisted in the
    data directory (``--data-dir`` or ``MILLRACE_DATA_DIR``), as the segment store node uses.
    """
    parser = argparse.ArgumentParser(
        prog="millrace mint-token", description="Mint a segment store delegation token."
    )
    parser.add_argument("resource", help='segment name, prefix ending in "/", or "*"')
    parser.add_argument("--access", choices=ACCESS_LEVELS, default=READ)
    parser.add_argument("--ttl", type=float, default=3600.0, help="lifetime in seconds")
    parser.add_argument("--secret", help="shared secret (default: $MILLRACE_TOKEN_SECRET)")
    parser.add_argument("--data-dir", help="data directory holding the persisted secret")
    args = parser.parse_args(argv)
    try:
        secret = args.secret or _secret_from_env(args.data_dir)
        print(mint_token(secret, args.resource, args.access, args.ttl))
    except ValueError as exc:
        print(f"millrace mint-token: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _secret_from_env(data_dir: str | None) -> str:
    from millrace.config import SegmentStoreSettings

    env = dict(os.environ)
    if data_dir:
        env["MILLRACE_DATA_DIR"] = data_dir
    return SegmentStoreSettings.from_env(env).token_secret
