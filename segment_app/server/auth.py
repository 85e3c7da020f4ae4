"""The segment store's side of delegation tokens: who may do what on the wire.

Responsibility: the ``Authorizer`` a wire server checks every request with (``TokenVerifier``
from ``millrace.kernel.claims`` when authentication is on, ``AllowAll`` when it is off), and the
``millrace mint-token`` command. The claims themselves (``mint_token``, ``TokenVerifier``) live
in the kernel, ``millrace.kernel.claims``. The server classes never read the environment;
``main_mint_token`` (the CLI) and ``segment_app.server.node`` do, at the edge.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Protocol

from millrace.kernel.claims import ACCESS_LEVELS, READ, mint_token

__all__ = [
    "AllowAll",
    "Authorizer",
    "main_mint_token",
]


class Authorizer(Protocol):
    def check(self, token: str, resource: str, access: str) -> None:
        """Raise AuthError unless ``token`` grants ``access`` to segment ``resource``."""


class AllowAll:
    """The authorizer used when authentication is off: everything is allowed."""

    def check(self, token: str, resource: str, access: str) -> None:
        return None


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
    from millrace.kernel.config import SegmentStoreSettings

    env = dict(os.environ)
    if data_dir:
        env["MILLRACE_DATA_DIR"] = data_dir
    return SegmentStoreSettings.from_env(env).token_secret
