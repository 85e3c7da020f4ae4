"""The segment store's side of delegation tokens: who may do what on the wire.

Responsibility: the ``Authorizer`` a wire server checks every request with (``TokenVerifier``
from ``millrace.kernel.claims`` when authentication is on, ``AllowAll`` when it is off). The
claims themselves (``mint_token``, ``TokenVerifier``) live in the kernel; ``millrace
mint-token`` is a command of the CLI (``millrace.ops.cli.users``).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["AllowAll", "Authorizer"]


class Authorizer(Protocol):
    def check(self, token: str, resource: str, access: str) -> None:
        """Raise AuthError unless ``token`` grants ``access`` to segment ``resource``."""


class AllowAll:
    """The authorizer used when authentication is off: everything is allowed."""

    def check(self, token: str, resource: str, access: str) -> None:
        return None
