"""Delegation token claims: what a wire-protocol request's ``delegationToken`` grants.

Part of the Django-free kernel: the controller mints tokens (``mint_token``), the segment store
checks them (``TokenVerifier``), the client only carries them. A token is a JWT signed with
HS256 and a secret shared by the controller and every segment store. Claims:

* ``resource``: the segment name it covers, or a prefix ending in ``/`` (``"scope/stream/"``
  covers every segment of that stream), or ``"*"`` (everything). A token for a segment also
  covers the segments derived from it (``<segment>#transaction.…``, ``<segment>#transient.…``).
* ``access``: ``"READ"`` or ``"READ_UPDATE"`` (which includes READ).
* ``exp``: expiry, Unix seconds (required; the Pravega client reads it to refresh tokens).

Secrets rotate without downtime (``TokenKeys``): a keyring file, when there is one, names the
secret that signs and the retired ones that still verify until a stated time; every process
re-reads it when it changes. ``millrace token secret rotate`` writes it.

Nothing here reads the environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import jwt

__all__ = [
    "ACCESS_LEVELS",
    "READ",
    "READ_UPDATE",
    "ROLES",
    "AuthError",
    "TokenKeys",
    "TokenVerifier",
    "fingerprint",
    "mint_token",
    "resource_matches",
    "stream_resource",
]

READ = "READ"
READ_UPDATE = "READ_UPDATE"
#: Access levels, weakest first: a token grants its level and every weaker one.
ACCESS_LEVELS = (READ, READ_UPDATE)

#: The roles of the users of a node (``controller_app.access.roles`` gives them their permissions;
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


log = logging.getLogger(__name__)

#: How often a process looks at the keyring file for a change, seconds.
KEYRING_CHECK_SECONDS = 1.0


def fingerprint(secret: str) -> str:
    """A secret's name that gives nothing away (the first 12 hex digits of its SHA-256)."""
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


class TokenKeys:
    """The secrets delegation tokens are signed and verified with.

    Without a keyring file, ``seed`` (``MILLRACE_TOKEN_SECRET`` or the secret persisted in the
    data directory) signs and verifies. With one (``keyring``, JSON: ``{"current": secret,
    "retiring": [{"secret": ..., "until": unix seconds}]}``), its current secret signs and
    verifies, and each retiring one verifies until its time: the overlap in which tokens it
    signed run out. The file is looked at once a second (and at once by ``refresh``, when a
    token does not verify: the file may have just been replaced); a file that does not parse
    keeps the last keys, is logged once (a warning) and is shown by ``describe``.
    """

    def __init__(
        self,
        seed: str,
        keyring: Path | None = None,
        *,
        clock: Callable[[], float] = time.time,
        overlap: bool = True,
    ) -> None:
        self.seed = seed
        self.keyring = keyring
        self._clock = clock
        #: TEST-ONLY off (``no-token-overlap``): retiring secrets verify nothing.
        self._overlap = overlap
        self._current = seed
        self._retiring: list[tuple[str, float]] = []
        self._stamp: tuple[int, int] | None = None
        self._checked = -KEYRING_CHECK_SECONDS
        self._lock = threading.Lock()
        self.error: str | None = None
        self.refresh(force=True)

    def refresh(self, *, force: bool = False) -> bool:
        """Re-read the keyring file if it changed (at most once a second unless ``force``);
        whether the keys changed."""
        now = time.monotonic()
        if self.keyring is None or (not force and now - self._checked < KEYRING_CHECK_SECONDS):
            return False
        with self._lock:
            self._checked = now
            try:
                info = os.stat(self.keyring)
            except OSError:
                changed, self._stamp = self._stamp is not None, None
                self._current, self._retiring = self.seed, []
                return changed
            stamp = (info.st_mtime_ns, info.st_size)
            if stamp == self._stamp:
                return False
            try:
                current, retiring = parse_keyring(self.keyring.read_text())
            except (OSError, ValueError) as exc:
                error = f"{self.keyring}: {exc}"
                if error != self.error:
                    log.warning("the token keyring does not load; the last keys serve: %s", error)
                self.error = error
                return False
            self._stamp, self._current, self._retiring, self.error = stamp, current, retiring, None
            return True

    @property
    def signing(self) -> str:
        """The secret new tokens are signed with."""
        self.refresh()
        return self._current

    def verifying(self) -> list[str]:
        """The secrets a token may be signed with now: the current one first."""
        self.refresh()
        now = self._clock()
        retiring = [s for s, until in self._retiring if until > now] if self._overlap else []
        return [self._current, *retiring]

    def describe(self) -> dict[str, Any]:
        """The keys by fingerprint: the signing one and the retiring ones with their end."""
        self.refresh(force=True)
        return {
            "signing": fingerprint(self._current),
            "retiring": [{"fingerprint": fingerprint(s), "until": until}
                         for s, until in self._retiring if until > self._clock()],
            "keyring": str(self.keyring) if self.keyring else None,
            "error": self.error,
        }  # fmt: skip

    def rotate(self, overlap_seconds: float) -> str:
        """Write a new keyring: a new secret signs; the one that signed until now verifies for
        ``overlap_seconds`` more (with those still retiring). The new secret's fingerprint."""
        if self.keyring is None:
            raise ValueError("no keyring file is configured (MILLRACE_TOKEN_KEYRING_FILE)")
        if not overlap_seconds >= 0:
            raise ValueError(f"the overlap must be 0 or more seconds, not {overlap_seconds}")
        self.refresh(force=True)
        now = self._clock()
        new = secrets.token_urlsafe(48)
        retiring = [(self._current, now + overlap_seconds)]
        retiring += [(s, until) for s, until in self._retiring if until > now]
        body = {"current": new, "retiring": [{"secret": s, "until": round(until, 3)}
                                             for s, until in retiring]}  # fmt: skip
        _write_private(self.keyring, json.dumps(body, indent=2) + "\n")
        self.refresh(force=True)
        return fingerprint(new)


def parse_keyring(text: str) -> tuple[str, list[tuple[str, float]]]:
    """(current secret, [(retiring secret, until)]) of a keyring file; ValueError if bad."""
    body = json.loads(text)
    if not isinstance(body, dict) or not isinstance(body.get("current"), str):
        raise ValueError('a keyring is {"current": "<secret>", "retiring": [...]}')
    if not body["current"].strip():
        raise ValueError("the current secret is empty")
    retiring = []
    for entry in body.get("retiring", []):
        if not isinstance(entry, dict) or not isinstance(entry.get("secret"), str):
            raise ValueError('each retiring key is {"secret": "<secret>", "until": <unix time>}')
        until = entry.get("until")
        if not isinstance(until, int | float):
            raise ValueError("a retiring key's 'until' must be a number of Unix seconds")
        retiring.append((entry["secret"], float(until)))
    return body["current"].strip(), retiring


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` whole with ``text``, readable only by its owner."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class TokenVerifier:
    """Checks delegation tokens against the shared secrets (a ``TokenKeys``, or one secret),
    with an injectable clock."""

    def __init__(self, keys: TokenKeys | str, *, clock: Callable[[], float] = time.time) -> None:
        if not (keys.seed if isinstance(keys, TokenKeys) else keys):
            raise ValueError(
                "authentication is on but no token secret is set "
                "(set MILLRACE_TOKEN_SECRET, or MILLRACE_AUTH=off to disable authentication)"
            )
        self.keys = keys if isinstance(keys, TokenKeys) else TokenKeys(keys, clock=clock)
        self._clock = clock
        #: Decoded tokens, with the secret each verified with (it may retire since).
        self._cache: dict[str, tuple[Mapping[str, Any], str]] = {}

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
        found = self._cache.get(token)
        keys = self.keys.verifying()
        if found is None or found[1] not in keys:
            try:
                found = self._decode(token, keys)
            except AuthError:
                if not self.keys.refresh(force=True):  # (the keyring may have just changed)
                    raise
                found = self._decode(token, self.keys.verifying())
            if len(self._cache) >= _CACHE_ENTRIES_MAX:
                self._cache.clear()
            self._cache[token] = found
        return found[0]

    def _decode(self, token: str, keys: list[str]) -> tuple[Mapping[str, Any], str]:
        """The token's claims and the secret that verified them."""
        options: Any = {"verify_exp": False, "require": ["exp", "resource", "access"]}
        for secret in keys:
            try:
                claims = jwt.decode(token, secret, algorithms=[_ALGORITHM], options=options)
                break
            except jwt.InvalidSignatureError:
                continue
            except jwt.InvalidTokenError as exc:
                raise AuthError(f"invalid delegation token: {exc}") from None
        else:
            raise AuthError(
                "invalid delegation token: its signature matches no current token secret "
                "(signed with another secret, or one retired by a rotation)"
            )
        if not isinstance(claims.get("exp"), int | float):
            raise AuthError("invalid delegation token: bad exp claim")
        if claims.get("access") not in ACCESS_LEVELS or not isinstance(claims["resource"], str):
            raise AuthError("invalid delegation token: bad access or resource claim")
        return claims, secret
