"""What an event writer holds until it is acknowledged: back-pressure and draining.

Responsibility: count the events written and not yet acknowledged (or failed), make writers
wait while ``limit`` of them are held (``pending_events_max``: the writer's memory bound), and
tell when none is left (``flush``). Each queued item carries a future and a weight (its
number of events); completing the item settles the future and gives its room back.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

__all__ = ["Held", "InFlight"]


class Held(Protocol):
    """An item of a writer's queue: its future and how many events it counts for."""

    @property
    def done(self) -> asyncio.Future[None]: ...

    @property
    def weight(self) -> int: ...


class InFlight:
    """The unacknowledged events of one writer."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Events written and not yet acknowledged (or failed).
        self.count = 0
        self._room = asyncio.Event()
        self._drained = asyncio.Event()

    @property
    def full(self) -> bool:
        return self.count >= self.limit

    async def wait_for_room(self) -> None:
        """Return once fewer than ``limit`` events are held (back-pressure)."""
        while self.count >= self.limit:
            self._room.clear()
            await self._room.wait()

    def add(self, events: int = 1) -> None:
        """Count ``events`` more as held."""
        self.count += events
        self._drained.clear()

    def new_future(self, events: int = 1) -> asyncio.Future[None]:
        """Count ``events`` more and make the future that settles them."""
        self.add(events)
        return asyncio.get_running_loop().create_future()

    def complete(self, item: Held, error: BaseException | None = None) -> None:
        """Settle ``item`` (acknowledged, or failed with ``error``) and give its room back;
        an item settled already is left as it is."""
        if item.done.done():
            return
        if error is None:
            item.done.set_result(None)
        else:
            item.done.set_exception(error)
        self._release(item.weight)

    def forget(self, item: Held) -> None:
        """``item`` was never queued (its write raised instead): cancel and uncount it."""
        item.done.cancel()
        self._release(item.weight)

    def _release(self, weight: int) -> None:
        self.count -= weight
        if self.count < self.limit:
            self._room.set()
        if not self.count:
            self._drained.set()

    async def wait_drained(self, timeout_s: float) -> None:
        """Return once nothing is held, or after ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drained.wait(), timeout_s)
