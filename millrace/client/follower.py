"""Following a stream: read every segment to its end, then its successors, in key order.

``StreamFollower`` is the reading loop shared by the WebSocket tail reads (server side) and the
Python client's event reader. It reads each segment of a start position from the segment store
(a read at the tail waits there for new data), splits the bytes into events and hands them to
``emit`` batch by batch, awaiting it before reading more (so a slow consumer slows the reads
and no buffer grows). When a segment ends (sealed and read to its end), it asks ``successors``
for the segments that replaced it and starts each one once every predecessor it was reading has
ended, so the events of one routing key come out in the order they were written. ``run`` returns
when every segment has ended and none has successors (the stream was sealed).

The caller supplies where segments are served (``Target``), the successor query and ``emit``;
the follower owns reconnection (a lost segment store is retried with a growing delay, from the
next unread offset: nothing skipped or repeated) and truncation (reading below the start offset
jumps to it and tells ``on_truncated``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from millrace.client.events import Event, EventSplitter
from millrace.client.transport import segment_store as ssc
from millrace.client.transport.pool import SegmentStorePool

#: Bytes asked for by one read of a segment.
READ_BYTES = 256 * 1024
#: How long to wait before asking again for the successors of a segment that ended before the
#: controller recorded them (the scale is completing).
SUCCESSOR_POLL_SECONDS = 0.2
#: Delay before retrying a segment store that went away (doubles up to the max).
RECONNECT_DELAY_SECONDS, RECONNECT_DELAY_MAX_SECONDS = 0.1, 5.0


@dataclass(frozen=True)
class Target:
    """A segment to read: its qualified name, id and the node that serves it."""

    name: str
    segment_id: int
    host: str
    port: int


#: ``successors(segment id)`` -> (successors with their predecessors' ids, stream ended).
Successors = Callable[[int], Awaitable[tuple[dict[Target, list[int]], bool]]]
Emit = Callable[[Target, list[Event], int], Awaitable[None]]
OnTruncated = Callable[[Target, int], Awaitable[None]]
#: ``on_moved(ended, started)``: a segment was read to its end and these successors start (at
#: offset 0) now; awaited before they start, so it is told before any of their events.
OnMoved = Callable[[Target, list[Target]], Awaitable[None]]
#: ``locate(segment name)`` -> the (host, port) serving it now.
Locate = Callable[[str], Awaitable[tuple[str, int]]]


class StreamFollower:
    def __init__(
        self,
        pool: SegmentStorePool,
        token: str,
        emit: Emit,
        *,
        successors: Successors | None = None,
        on_truncated: OnTruncated | None = None,
        token_refresh: Callable[[], Awaitable[str]] | None = None,
        on_moved: OnMoved | None = None,
        locate: Locate | None = None,
    ) -> None:
        self.pool = pool
        #: Where a segment is served now, asked after a lost connection or a WrongHost (its
        #: container may have moved); None: always the target's node.
        self.locate = locate
        self.token = token
        #: Gets a new ``token`` when the segment store says it has expired (else that error
        #: ends the reading).
        self.token_refresh = token_refresh
        self.emit = emit
        self.successors = successors
        self.on_truncated = on_truncated
        self.on_moved = on_moved
        self._done: set[int] = set()
        self._started: set[int] = set()
        self._waiting: dict[int, set[int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: Segments being read now (counted here, not by tasks: a finished task leaves the
        #: task set only when its done-callback runs, which may be after another checks it).
        self._active = 0
        self._failure: BaseException | None = None
        self._finished = asyncio.Event()

    # -- one segment -----------------------------------------------------------------------

    async def read_segment(self, target: Target, offset: int) -> None:
        """Emit the events of ``target`` from ``offset`` until its end (if it is ever sealed).
        Raises ``EventFormatError`` for bytes that are not events."""
        splitter = EventSplitter(offset)
        delay = RECONNECT_DELAY_SECONDS
        node = (target.host, target.port)
        while True:
            used = self.token
            try:
                client = await self.pool.get(*node)
                result = await client.read_segment(
                    target.name, splitter.offset + splitter.buffered, READ_BYTES, token=used
                )
            except ssc.SegmentTruncatedError as exc:
                splitter = EventSplitter(exc.start_offset)
                if self.on_truncated is not None:
                    await self.on_truncated(target, exc.start_offset)
                continue
            except (ssc.ConnectionLostError, ssc.ContainerOfflineError, OSError):
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_DELAY_MAX_SECONDS)
                node = await self._locate(target, node)
                continue
            except (ssc.SegmentNotFoundError, ssc.SegmentSealedError):
                return  # deleted (stream deleted or truncated away), or sealed at the end
            except ssc.AuthTokenCheckFailedError as exc:
                if not exc.expired or self.token_refresh is None:
                    raise
                if self.token != used:
                    continue  # another segment's read renewed it meanwhile
                token = await self.token_refresh()
                if token == used:
                    raise  # (no newer one to be had)
                self.token = token
                continue
            delay = RECONNECT_DELAY_SECONDS
            events = splitter.feed(result.offset, result.data)
            if events:
                await self.emit(target, events, splitter.offset)
            if result.end_of_segment and not result.data:
                return

    async def _locate(self, target: Target, node: tuple[str, int]) -> tuple[str, int]:
        """Where ``target`` is served now (``node`` when that cannot be asked now)."""
        if self.locate is None:
            return node
        try:
            return await self.locate(target.name)
        except Exception:  # the controller away too: the next failure asks again
            return node

    # -- a whole stream --------------------------------------------------------------------

    async def run(self, position: dict[Target, int]) -> None:
        """Follow the stream from ``position`` until it ends (sealed and read to the end)."""
        if not position:
            return
        for target, offset in position.items():
            self._start(target, offset)
        try:
            await self._finished.wait()
        finally:
            for task in list(self._tasks):
                task.cancel()
        if self._failure is not None:
            raise self._failure

    def _start(self, target: Target, offset: int) -> None:
        self._started.add(target.segment_id)
        self._active += 1
        task = asyncio.get_running_loop().create_task(self._follow(target, offset))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _follow(self, target: Target, offset: int) -> None:
        try:
            await self.read_segment(target, offset)
            found = await self._successors_of(target)
            self._done.add(target.segment_id)
            ready = []
            for successor, predecessors in found.items():
                if successor.segment_id in self._started:
                    continue
                # Predecessors this follower never read (before its start) do not hold it.
                left = self._waiting.setdefault(
                    successor.segment_id, set(predecessors) & self._started
                )
                left.difference_update(self._done)
                if not left:
                    del self._waiting[successor.segment_id]
                    self._started.add(successor.segment_id)
                    ready.append(successor)
            if self.on_moved is not None:
                await self.on_moved(target, ready)
            for successor in ready:
                self._start(successor, 0)
            self._active -= 1
            if self._active == 0 and not self._waiting:
                self._finished.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failure = exc
            self._finished.set()

    async def _successors_of(self, target: Target) -> dict[Target, list[int]]:
        if self.successors is None:
            return {}
        while True:
            found, ended = await self.successors(target.segment_id)
            if found or ended:
                return found
            await asyncio.sleep(SUCCESSOR_POLL_SECONDS)
