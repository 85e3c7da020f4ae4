"""Reader groups in the client: readers that share streams, with checkpoints and resets.

    group = await manager.create_reader_group("demo", "billing", ["demo/orders"])
    reader = await group.create_reader("reader-1")
    while (event := await reader.read_next(timeout=5)) is not None:
        if event.is_checkpoint:
            continue              # every event before it is in the checkpoint's stream cut
        handle(event.data)
    await reader.close()          # leaves the group: its segments go to the other readers

The controller holds the group's state (``controller_app.workflows.reader_groups``); a reader
joins, then syncs every ``groupRefreshTimeMs`` (and at once when it has something to say):
it reports its positions (the offset up to which it handed events to the application), the
segments it read to their end and those it released, and acknowledges checkpoints; the answer
gives it segments to read, with where they are served. Each segment it holds is read by its
own task into a bounded buffer (back-pressure: reading pauses while the buffer is full), and
``read_next`` hands out events from the buffers in turn.

Guarantees: a segment is read by one reader of the group at a time; per routing key, events
come in the order written, across scaling (a successor is handed out only after all its
predecessors were read to their end *and* handed to the application); a reader that dies has
its segments taken over from its last reported position, so the events it handed out after
its last sync (at most ``groupRefreshTimeMs`` of them) may be read again (at-least-once).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx

from millrace.client import segment_store as ssc
from millrace.client.controller import AsyncControllerClient, ControllerError
from millrace.client.events import Event, EventSplitter
from millrace.client.follower import (
    READ_BYTES,
    RECONNECT_DELAY_MAX_SECONDS,
    RECONNECT_DELAY_SECONDS,
)
from millrace.client.pool import SegmentStorePool
from millrace.client.reader import EventRead
from millrace.client.streamcut import StreamCut

#: Bytes a reader buffers per segment before it stops reading that segment (back-pressure).
SEGMENT_BUFFER_BYTES = 4 * 1024 * 1024
#: How long ``initiate_checkpoint`` waits for every reader by default.
CHECKPOINT_WAIT_SECONDS = 60.0


class TruncatedDataError(Exception):
    """The reader's position in a segment was truncated away; reading goes on at the first
    event still there (the next ``read_next`` returns it)."""

    def __init__(self, message: str, resume_offset: int) -> None:
        super().__init__(message)
        self.resume_offset = resume_offset


class ReaderNotInGroupError(Exception):
    """The controller no longer counts this reader in its group (it was declared dead after
    not syncing for ``readerTimeoutMs``): its segments went to other readers. Create a new
    reader to go on."""


def _start_of(scoped: str, start: str | StreamCut) -> Any:
    if isinstance(start, StreamCut):
        if f"{start.scope}/{start.stream}" != scoped:
            raise ValueError(
                f"the stream cut given for {scoped} is of {start.scope}/{start.stream}"
            )
        return start.to_text()
    if start not in ("head", "tail"):
        raise ValueError("a start is head, tail or a StreamCut")
    return start


def _cut_of(scoped: str, cut: dict[str, int]) -> StreamCut:
    scope, stream = scoped.split("/")
    return StreamCut(scope, stream, {int(k): v for k, v in cut.items()})


class AsyncReaderGroup:
    """A reader group of the controller: readers, checkpoints, reset, retention cuts."""

    def __init__(self, controller: AsyncControllerClient, scope: str, name: str) -> None:
        self.controller, self.scope, self.name = controller, scope, name
        self.path = f"/scopes/{scope}/readergroups/{name}"

    @classmethod
    async def create(
        cls,
        controller: AsyncControllerClient,
        scope: str,
        name: str,
        streams: list[str] | dict[str, str | StreamCut],
        *,
        start: str | StreamCut = "head",
        retention_type: str = "NONE",
        reader_timeout_ms: int = 30_000,
        group_refresh_time_ms: int = 1_000,
    ) -> AsyncReaderGroup:
        if isinstance(streams, list):
            streams = dict.fromkeys(streams, start)
        body = {
            "readerGroupName": name,
            "streams": {s: _start_of(s, v) for s, v in streams.items()},
            "retentionType": retention_type,
            "readerTimeoutMs": reader_timeout_ms,
            "groupRefreshTimeMs": group_refresh_time_ms,
        }
        await controller.call("POST", f"/scopes/{scope}/readergroups", body)
        return cls(controller, scope, name)

    async def create_reader(self, reader_id: str | None = None, **options: Any) -> AsyncGroupReader:
        reader = AsyncGroupReader(self, reader_id or uuid.uuid4().hex, **options)
        await reader.join()
        return reader

    async def describe(self) -> dict[str, Any]:
        return await self.controller.call("GET", self.path)  # type: ignore[no-any-return]

    async def initiate_checkpoint(
        self, name: str, timeout: float = CHECKPOINT_WAIT_SECONDS
    ) -> dict[str, StreamCut]:
        """Start checkpoint ``name`` and wait until every reader has handed out its marker;
        the stream cut of each stream, by ``"scope/stream"``. Readers must keep reading."""
        await self.controller.call("POST", f"{self.path}/checkpoints", {"checkpointName": name})
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            status = await self.controller.call("GET", f"{self.path}/checkpoints/{name}")
            if status["complete"]:
                return {
                    scoped: _cut_of(scoped, cut) for scoped, cut in status["streamCuts"].items()
                }
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(
                    f"checkpoint {name} still waits for readers {status['pendingReaders']}"
                )
            await asyncio.sleep(0.05)

    async def reset(self, streams: dict[str, str | StreamCut] | None = None) -> None:
        """Read again from ``streams``' starts (default: the configured ones). Every reader
        drops what it holds and reads on from the new positions."""
        body = {} if streams is None else {
            "streams": {s: _start_of(s, v) for s, v in streams.items()}
        }  # fmt: skip
        await self.controller.call("POST", f"{self.path}/reset", body)

    async def update_retention_stream_cut(self, cuts: dict[str, StreamCut]) -> None:
        body = {"streamCuts": {s: c.to_text() for s, c in cuts.items()}}
        await self.controller.call("PUT", f"{self.path}/subscriber-stream-cuts", body)

    async def delete(self) -> None:
        await self.controller.call("DELETE", self.path)


@dataclass
class _Segment:
    """A segment this reader holds: where it is, what it handed out, what it buffered."""

    key: str
    name: str
    host: str
    port: int
    delivered: int
    buffer: deque[Event | TruncatedDataError] = field(default_factory=deque)
    buffered_bytes: int = 0
    room: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    #: The end offset once the segment was read to its end (sealed).
    end: int | None = None

    @property
    def fully_handed_out(self) -> bool:
        return self.end is not None and not self.buffer


class AsyncGroupReader:
    """One reader of a reader group (see the module docstring)."""

    def __init__(
        self,
        group: AsyncReaderGroup,
        reader_id: str,
        *,
        segment_buffer_bytes: int = SEGMENT_BUFFER_BYTES,
        read_bytes: int = READ_BYTES,
    ) -> None:
        self.group = group
        self.reader_id = reader_id
        self.segment_buffer_bytes = segment_buffer_bytes
        self.read_bytes = read_bytes
        self._segments: dict[str, _Segment] = {}
        self._turn: deque[str] = deque()
        self._generation = 0
        self._refresh = 1.0
        self._pool: SegmentStorePool | None = None
        self._tokens: dict[str, str] = {}
        self._sync_task: asyncio.Task[None] | None = None
        self._sync_now = asyncio.Event()
        self._data = asyncio.Event()
        self._released: dict[str, int] = {}
        self._checkpoint_seen: set[str] = set()
        self._checkpoint_due: str | None = None
        self._checkpoint_ack: tuple[str, dict[str, int]] | None = None
        self._finished = False
        self._fatal: BaseException | None = None
        self._closed = False

    @property
    def _base(self) -> str:
        return f"{self.group.path}/readers/{self.reader_id}"

    async def join(self) -> None:
        answer = await self.group.controller.call(
            "POST", f"{self.group.path}/readers", {"readerId": self.reader_id}
        )
        self._generation = answer["generation"]
        self._refresh = answer["groupRefreshTimeMs"] / 1000
        self._pool = SegmentStorePool()
        self._sync_task = asyncio.get_running_loop().create_task(self._sync_loop())

    # -- handing out events --------------------------------------------------------------------

    async def read_next(self, timeout: float | None = None) -> EventRead | None:
        """The next event, a checkpoint marker (``is_checkpoint``), or ``None`` once every
        stream of the group is sealed and read to its end. ``TimeoutError`` if nothing comes
        within ``timeout`` s; ``TruncatedDataError`` once where data was truncated away."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self._checkpoint_due is not None:
                name, self._checkpoint_due = self._checkpoint_due, None
                positions = {k: s.delivered for k, s in self._segments.items()}
                self._checkpoint_ack = (name, positions)
                self._sync_now.set()
                return EventRead("", 0, b"", checkpoint_name=name)
            item = self._next_buffered()
            if item is not None:
                return item
            if self._finished and not self._segments:
                return None
            self._data.clear()
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise TimeoutError("no event within the timeout")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._data.wait(), left)

    def _next_buffered(self) -> EventRead | None:
        for _ in range(len(self._turn)):
            key = self._turn[0]
            self._turn.rotate(-1)
            segment = self._segments.get(key)
            if segment is None or not segment.buffer:
                continue
            item = segment.buffer.popleft()
            if isinstance(item, TruncatedDataError):
                segment.delivered = max(segment.delivered, item.resume_offset)
                if segment.fully_handed_out:
                    self._sync_now.set()
                raise item
            segment.delivered = item.next_offset
            segment.buffered_bytes -= len(item.data)
            segment.room.set()
            if segment.fully_handed_out:
                self._sync_now.set()  # its successors may be waiting for it
            return EventRead(segment.name, item.offset, item.data)
        return None

    # -- reading segments ----------------------------------------------------------------------

    async def _token(self, scope: str, stream: str) -> str:
        scoped = f"{scope}/{stream}"
        if scoped not in self._tokens:
            self._tokens[scoped] = await self.group.controller.delegation_token(scope, stream)
        return self._tokens[scoped]

    async def _fetch(self, segment: _Segment, scope: str, stream: str) -> None:
        assert self._pool is not None
        token = await self._token(scope, stream)
        splitter = EventSplitter(segment.delivered)
        delay = RECONNECT_DELAY_SECONDS
        while True:
            while segment.buffered_bytes >= self.segment_buffer_bytes:
                segment.room.clear()
                await segment.room.wait()
            try:
                client = await self._pool.get(segment.host, segment.port)
                result = await client.read_segment(
                    segment.name, splitter.offset + splitter.buffered, self.read_bytes, token=token
                )
            except ssc.SegmentTruncatedError as exc:
                splitter = EventSplitter(exc.start_offset)
                message = f"{segment.name} was truncated: reading goes on at {exc.start_offset}"
                segment.buffer.append(TruncatedDataError(message, exc.start_offset))
                self._data.set()
                continue
            except ssc.AuthTokenCheckFailedError as exc:
                if not exc.expired:
                    raise
                self._tokens.pop(f"{scope}/{stream}", None)  # expired: ask for a new one
                token = await self._token(scope, stream)
                continue
            except (ssc.ConnectionLostError, ssc.ContainerOfflineError, OSError):
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_DELAY_MAX_SECONDS)
                continue
            except ssc.SegmentNotFoundError:
                message = f"{segment.name} no longer exists (truncated or deleted)"
                segment.buffer.append(TruncatedDataError(message, splitter.offset))
                segment.end = splitter.offset
                self._data.set()
                self._sync_now.set()
                return
            except ssc.SegmentSealedError:
                segment.end = splitter.offset
                self._sync_now.set()
                return
            delay = RECONNECT_DELAY_SECONDS
            events = splitter.feed(result.offset, result.data)
            if events:
                segment.buffer.extend(events)
                segment.buffered_bytes += sum(len(e.data) for e in events)
                self._data.set()
            if result.end_of_segment and not result.data:
                segment.end = splitter.offset
                self._sync_now.set()
                return

    def _hold(self, where: dict[str, Any]) -> None:
        key = where["key"]
        segment = _Segment(key, where["segment"], where["host"], where["port"], where["offset"])
        segment.task = asyncio.get_running_loop().create_task(
            self._fetch(segment, where["scope"], where["stream"])
        )
        segment.task.add_done_callback(self._fetch_done)
        self._segments[key] = segment
        self._turn.append(key)

    def _fetch_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._fatal = task.exception()
            self._data.set()

    def _drop(self, key: str) -> _Segment | None:
        segment = self._segments.pop(key, None)
        if segment is not None and segment.task is not None:
            segment.task.cancel()
        with contextlib.suppress(ValueError):
            self._turn.remove(key)
        return segment

    # -- coordination --------------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        delay = RECONNECT_DELAY_SECONDS
        while not self._closed:
            try:
                await self._sync_once()
                delay = RECONNECT_DELAY_SECONDS
            except ControllerError as exc:
                if exc.code == "reader-not-in-group":
                    self._fatal = ReaderNotInGroupError(exc.message)
                    self._data.set()
                    return
                if exc.status < 500:
                    self._fatal = exc
                    self._data.set()
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_DELAY_MAX_SECONDS)
                continue
            except (httpx.TransportError, OSError):
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_DELAY_MAX_SECONDS)
                continue
            except BaseException as exc:
                if not isinstance(exc, asyncio.CancelledError):
                    self._fatal = exc
                    self._data.set()
                raise
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sync_now.wait(), self._refresh)
            self._sync_now.clear()

    async def _sync_once(self) -> None:
        ended = {k: s.end for k, s in self._segments.items() if s.fully_handed_out}
        released = dict(self._released)
        ack = self._checkpoint_ack
        body: dict[str, Any] = {
            "generation": self._generation,
            "positions": {k: s.delivered for k, s in self._segments.items()},
            "ended": ended,
            "released": released,
        }
        if ack is not None:
            body["checkpoint"], body["checkpointPositions"] = ack
        answer = await self.group.controller.call("POST", f"{self._base}/sync", body)
        for key in released:
            self._released.pop(key, None)
        if ack is not None and self._checkpoint_ack is ack:
            self._checkpoint_ack = None
        if answer["reinitialize"]:
            for key in list(self._segments):
                self._drop(key)
            self._generation = answer["generation"]
            self._checkpoint_due = self._checkpoint_ack = None
            self._released.clear()
            self._sync_now.set()
            return
        for key in ended:
            if key not in answer["endPending"]:
                self._drop(key)
        for where in answer["acquired"]:
            self._hold(where)
        if answer["release"]:
            self._release(answer["release"])
        name = answer["checkpoint"]
        if name is not None and name not in self._checkpoint_seen:
            self._checkpoint_seen.add(name)
            self._checkpoint_due = name
        self._finished = answer["finished"]
        self._data.set()

    def _release(self, count: int) -> None:
        # Prefer segments with nothing buffered: nothing read is thrown away.
        order = sorted(self._segments.values(), key=lambda s: (len(s.buffer), s.key))
        for segment in order[:count]:
            if segment.end is not None:
                continue  # ends soon anyway
            self._drop(segment.key)
            self._released[segment.key] = segment.delivered
        self._sync_now.set()

    # -- leaving -------------------------------------------------------------------------------

    async def close(self) -> None:
        """Leave the group: the segments go back at the positions handed out."""
        if self._closed:
            return
        self._closed = True
        if self._sync_task is not None:
            self._sync_task.cancel()
            with contextlib.suppress(BaseException):
                await self._sync_task
        positions = {k: s.delivered for k, s in self._segments.items()} | self._released
        for key in list(self._segments):
            self._drop(key)
        with contextlib.suppress(ControllerError, httpx.TransportError):
            await self.group.controller.call("DELETE", self._base, {"positions": positions})
        if self._pool is not None:
            await self._pool.close()
