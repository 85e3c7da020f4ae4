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
from millrace.client.streamcut import StreamCut

_END = object()


@dataclass(frozen=True)
class EventRead:
    """One event: the segment it was read from, its offset there, and its bytes. A reader
    group's reader also hands out checkpoint markers: ``is_checkpoint``, no data."""

    segment: str
    offset: int
    data: bytes
    checkpoint_name: str | None = None

    @property
    def is_checkpoint(self) -> bool:
        return self.checkpoint_name is not None


class AsyncEventReader:
    def __init__(
        self,
        controller: AsyncControllerClient,
        scope: str,
        stream: str,
        *,
        start: str | StreamCut = "head",
        buffered_events_max: int = 10_000,
    ) -> None:
        if not isinstance(start, StreamCut) and start not in ("head", "tail"):
            raise ValueError("start must be head, tail or a StreamCut")
        if isinstance(start, StreamCut) and (start.scope, start.stream) != (scope, stream):
            raise ValueError(f"the stream cut is of {start.scope}/{start.stream}")
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
        if isinstance(self.start, StreamCut):
            cut = await cut_of(self.controller, self.scope, self.stream, "given", self.start)
        else:
            cut = await cut_of(self.controller, self.scope, self.stream, self.start)
        return {await self._target(sid, name): off for sid, (name, off) in cut.items()}

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
            pool = self._pool
            assert pool is not None
            follower = StreamFollower(pool, pool.delegation_token, self._emit,
                                      successors=self._successors,
                                      token_refresh=pool.token_refresh)  # fmt: skip
            await follower.run(await self._position())
            await self._queue.put(_END)
        except BaseException as exc:  # hand it to read_next
            await self._queue.put(exc)
            raise

    async def _ensure_started(self) -> None:
        if self._task is None:
            self._pool = await SegmentStorePool.for_stream(self.controller, self.scope, self.stream)
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


async def cut_of(
    controller: AsyncControllerClient,
    scope: str,
    stream: str,
    at: str,
    given: StreamCut | None = None,
) -> dict[int, tuple[str, int]]:
    """``{segment id: (name, offset)}`` of the head, the tail (``at="tail"``), a time in ms,
    or of ``given`` once the controller has checked it is a position of the stream."""
    base = f"/scopes/{scope}/streams/{stream}"
    if given is not None:
        body = {"streamCut": {str(k): v for k, v in given.positions.items()}}
        answer = await controller.call("POST", f"{base}/stream-cut/validity", body)
        if not answer["valid"]:
            raise ValueError(f"not a stream cut of {scope}/{stream}: {answer['message']}")
        out = {}
        for segment_id, offset in given.positions.items():
            detail = await controller.call("GET", f"{base}/segments/{segment_id}")
            out[segment_id] = (detail["name"], offset)
        return out
    query = "current" if at == "tail" else at
    found = (await controller.call("GET", f"{base}/segments?at={query}"))["segments"]
    out = {}
    for item in found:
        offset = item.get("offset", 0)
        if at == "tail":
            offset = (await controller.call("GET", f"{base}/segments/{item['segmentId']}"))[
                "length"
            ]
        out[item["segmentId"]] = (item["name"], offset)
    return out
