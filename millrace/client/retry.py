"""Which failures a client rides through, and which reach its caller at once.

Responsibility: ``transient(exc)`` is the one rule every retrying part of the client (writers,
readers, transactions, byte streams, the controller client's move between controllers) reads:
a node or controller that is away, silent, restarting or moved is worth another try after a
pause; a refusal that says what is wrong (bad input, no such segment, a sealed segment, a
credential or TLS that does not fit) is not.
"""

from __future__ import annotations

import httpx

from millrace.client.controller import ControllerError
from millrace.client.errors import ConnectionLostError, ContainerOfflineError

__all__ = ["transient"]

#: Controller answers that say "not now" rather than "no": 502-504 (a proxy, a controller
#: restarting) and 503 (a service around it is away, with Retry-After).
_TRANSIENT_STATUSES = frozenset({502, 503, 504})


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth another try after a pause."""
    if isinstance(exc, ConnectionLostError | ContainerOfflineError | httpx.TransportError):
        return True
    if isinstance(exc, ControllerError):
        return exc.status in _TRANSIENT_STATUSES
    return isinstance(exc, OSError)  # (TimeoutError too; TlsRefused is not an OSError)
