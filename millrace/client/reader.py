"""An event reader: one reader of a whole stream, from its head (or tail), across scaling.

``AsyncEventReader.read_next()`` returns the next event (``EventRead``: segment, offset, data),
waits for new ones at the tail, and returns ``None`` once the stream is sealed and read to its
end. Per routing key, events come in the order written, across scaling (``StreamFollower``).
Events are buffered up to ``buffered_events_max`` ahead of the caller; reading then pauses
(back-pressure). Reader groups, which share streams between readers with checkpoints, are in
``millrace.client.reader_group``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

from millrace.client.controller import AsyncControllerClient
from millrace.client.events import Event, EventRead
from millrace.client.follower import StreamFollower, Target
from millrace.client.streamcut import StreamCut
from millrace.client.transport.pool import SegmentStorePool
from millrace.kernel import rest_paths as paths

_END = object()
_new_tuple = tuple.__new__


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
        if buffered_events_max < 1:
            raise ValueError(f"buffered_events_max must be at least 1, not {buffered_events_max}")
        self.buffered_events_max = buffered_events_max
        #: Events read ahead of the caller; the end (``_END``) or an error comes after them.
        self._buffer: deque[EventRead] = deque()
        self._outcome: Any = None
        self._data = asyncio.Event()
        self._room = asyncio.Event()
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
        info = await self.controller.call("GET", paths.stream_info(self.scope, self.stream))
        return {}, info["state"] in ("SEALING", "SEALED", "DELETING")

    async def _emit(self, target: Target, events: list[Event], next_offset: int) -> None:
        while len(self._buffer) >= self.buffered_events_max:
            self._room.clear()
            await self._room.wait()
        name = target.name
        self._buffer.extend([_new_tuple(EventRead, (name, o, d, None)) for o, d in events])
        self._data.set()

    async def _run(self) -> None:
        try:
            pool = self._pool
            assert pool is not None
            follower = StreamFollower(pool, pool.delegation_token, self._emit,
                                      successors=self._successors,
                                      token_refresh=pool.token_refresh,
                                      locate=self.controller.segment_node)  # fmt: skip
            await follower.run(await self._position())
            self._outcome = _END
        except BaseException as exc:  # hand it to read_next
            self._outcome = exc
            raise
        finally:
            self._data.set()

    async def _ensure_started(self) -> None:
        if self._task is None:
            self._pool = await SegmentStorePool.for_stream(self.controller, self.scope, self.stream)
            self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def finished(self) -> bool:
        """The stream is sealed and every event was handed out."""
        return self._ended

    async def read_next(self, timeout: float | None = None) -> EventRead | None:
        """The next event; ``None`` if none comes within ``timeout`` seconds, or at the end
        of a sealed stream (``finished`` then says so)."""
        batch = await self.read_batch(1, timeout)
        return batch[0] if batch else None

    async def read_batch(
        self, max_events: int = 4096, timeout: float | None = None
    ) -> list[EventRead]:
        """Up to ``max_events`` events read ahead now, waiting up to ``timeout`` s for the
        first; empty if none came in time, or at the end of a sealed stream (``finished``)."""
        if max_events < 1:
            raise ValueError(f"max_events must be at least 1, not {max_events}")
        if self._ended:
            return []
        await self._ensure_started()
        buffer = self._buffer
        if not buffer and self._outcome is None:
            self._data.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._data.wait(), timeout)
        if buffer:
            pop = buffer.popleft
            batch = [pop() for _ in range(min(max_events, len(buffer)))]
            self._room.set()
            return batch
        if self._outcome is _END:
            self._ended = True
        elif self._outcome is not None:
            self._ended = True
            raise self._outcome
        return []

    def __aiter__(self) -> AsyncEventReader:
        return self

    async def __anext__(self) -> EventRead:
        while (item := await self.read_next()) is None:
            if self._ended:
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
    if given is not None:
        body = {"streamCut": {str(k): v for k, v in given.positions.items()}}
        answer = await controller.call("POST", paths.stream_cut_validity(scope, stream), body)
        if not answer["valid"]:
            raise ValueError(f"not a stream cut of {scope}/{stream}: {answer['message']}")
        out = {}
        for segment_id, offset in given.positions.items():
            detail = await controller.call("GET", paths.segment(scope, stream, segment_id))
            out[segment_id] = (detail["name"], offset)
        return out
    query = "current" if at == "tail" else at
    found = (await controller.call("GET", paths.segments(scope, stream, at=query)))["segments"]
    out = {}
    for item in found:
        offset = item.get("offset", 0)
        if at == "tail":
            detail = await controller.call("GET", paths.segment(scope, stream, item["segmentId"]))
            offset = detail["length"]
        out[item["segmentId"]] = (item["name"], offset)
    return out
