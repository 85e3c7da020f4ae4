"""Which failures a client rides through, and which reach its caller at once.

Responsibility: ``transient(exc)`` is the one rule every retrying part of the client (writers,
readers, transactions, byte streams, the controller client's move between controllers) reads:
a node or controller that is away, silent, restarting or moved is worth another try after a
pause; a refusal that says what is wrong (bad input, no such segment, a sealed segment, a
credential or TLS that does not fit) is not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx

from millrace.client.controller import ControllerError
from millrace.client.errors import ConnectionLostError, ContainerOfflineError

__all__ = ["RETRY_PAUSE_MAX_S", "RETRY_PAUSE_S", "transient", "with_retries"]

T = TypeVar("T")

#: The first pause before another try; it doubles up to the max.
RETRY_PAUSE_S, RETRY_PAUSE_MAX_S = 0.1, 1.0

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


async def with_retries(
    attempt: Callable[[], Awaitable[T]], *, timeout_s: float, since: float | None = None
) -> T:
    """``attempt()``'s answer, trying again after each transient failure with a growing pause
    until ``timeout_s`` after ``since`` (loop time; default: now); then, or at once for a
    failure that is not transient, its error is raised."""
    loop = asyncio.get_running_loop()
    deadline = (loop.time() if since is None else since) + timeout_s
    pause = RETRY_PAUSE_S
    while True:
        try:
            return await attempt()
        except Exception as exc:
            if not transient(exc) or loop.time() + pause > deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, RETRY_PAUSE_MAX_S)
