"""An event reader: one reader of a whole stream, from its head (or tail), across scaling.

``AsyncEventReader.read_next()`` returns the next event (``EventRead``: segment, offset, data),
waits for new ones at the tail, and returns ``None`` once the stream is sealed and read to its
end. Per routing key, events come in the order written, across scaling (``StreamFollower``).
Events are buffered up to ``buffered_events_max`` ahead of the caller; reading then pauses
(back-pressure). Reader groups, which share a stream between readers with checkpoints, are not
built yet.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from millrace.client.controller import AsyncControllerClient
from millrace.client.events import Event
from millrace.client.follower import StreamFollower, Target
from millrace.client.pool import SegmentStorePool

_END = object()


@dataclass(frozen=True)
class EventRead:
    """One event: the segment it was read from, its offset there, and its bytes."""

    segment: str
    offset: int
    data: bytes


class AsyncEventReader:
    def __init__(
        self,
        controller: AsyncControllerClient,
        scope: str,
        stream: str,
        *,
        start: str = "head",
        buffered_events_max: int = 10_000,
    ) -> None:
        if start not in ("head", "tail"):
            raise ValueError("start must be head or tail")
        self.controller = controller
        self.scope, self.stream, self.start = scope, stream, start
        self._queue: asyncio.Queue[Any] = asyncio.Queue(buffered_events_max)
        self._task: asyncio.Task[None] | None = None
        self._pool: SegmentStorePool | None = None
        self._ended = False

    async def _target(self, segment_id: int, name: str) -> Target:
        host, port = await self.controller.segment_uri(self.scope, self.stream, segment_id)
        return Target(name, segment_id, host, port)

    async def _position(self) -> dict[Target, int]:
        base = f"/scopes/{self.scope}/streams/{self.stream}"
        at = "head" if self.start == "head" else "current"
        found = await self.controller.call("GET", f"{base}/segments?at={at}")
        position = {}
        for item in found["segments"]:
            offset = item.get("offset", 0)
            if self.start == "tail":
                detail = await self.controller.call("GET", f"{base}/segments/{item['segmentId']}")
                offset = detail["length"]
            position[await self._target(item["segmentId"], item["name"])] = offset
        return position

    async def _successors(self, segment_id: int) -> tuple[dict[Target, list[int]], bool]:
        found = await self.controller.successors(self.scope, self.stream, segment_id)
        targets = {await self._target(s.segment_id, s.name): preds for s, preds in found}
        if targets:
            return targets, False
        info = await self.controller.call("GET", f"/scopes/{self.scope}/streams/{self.stream}/info")
        return {}, info["state"] in ("SEALING", "SEALED", "DELETING")

    async def _emit(self, target: Target, events: list[Event], next_offset: int) -> None:
        for event in events:
            await self._queue.put(EventRead(target.name, event.offset, event.data))

    async def _run(self) -> None:
        try:
            follower = StreamFollower(self._pool, self._token, self._emit,  # type: ignore[arg-type]
                                      successors=self._successors)  # fmt: skip
            await follower.run(await self._position())
            await self._queue.put(_END)
        except BaseException as exc:  # hand it to read_next
            await self._queue.put(exc)
            raise

    async def _ensure_started(self) -> None:
        if self._task is None:
            self._token = await self.controller.delegation_token(self.scope, self.stream)
            self._pool = SegmentStorePool(delegation_token=self._token)
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def read_next(self, timeout: float | None = None) -> EventRead | None:
        """The next event; ``None`` at the end of a sealed stream. ``TimeoutError`` if none
        comes within ``timeout`` seconds."""
        if self._ended:
            return None
        await self._ensure_started()
        item = await asyncio.wait_for(self._queue.get(), timeout)
        if item is _END:
            self._ended = True
            return None
        if isinstance(item, BaseException):
            self._ended = True
            raise item
        return item  # type: ignore[no-any-return]

    def __aiter__(self) -> AsyncEventReader:
        return self

    async def __anext__(self) -> EventRead:
        item = await self.read_next()
        if item is None:
            raise StopAsyncIteration
        return item

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        if self._pool is not None:
            await self._pool.close()
