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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from millrace.client.controller import AsyncControllerClient, ControllerError
from millrace.client.events import EventRead, EventSplitter
from millrace.client.follower import (
    READ_BYTES,
    RECONNECT_DELAY_MAX_SECONDS,
    RECONNECT_DELAY_SECONDS,
)
from millrace.client.streamcut import StreamCut
from millrace.client.transport import segment_store as ssc
from millrace.client.transport.pool import SegmentStorePool
from millrace.kernel import defaults, traces
from millrace.kernel import rest_paths as paths
from millrace.kernel.naming import parse_segment_name, segment_epoch

#: Bytes a reader buffers per segment before it stops reading that segment (back-pressure).
SEGMENT_BUFFER_BYTES = 4 * 1024 * 1024
#: How long ``initiate_checkpoint`` waits for every reader by default.
CHECKPOINT_WAIT_SECONDS = 60.0
#: Longest pause between two questions of ``initiate_checkpoint`` to the controller.
CHECKPOINT_POLL_MAX_S = 1.0


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


@dataclass(frozen=True)
class TimeWindow:
    """Where a reader stands in event time (Pravega's ``TimeWindow``), from the stream's
    newest watermark: ``lower_time_bound`` once the reader is at or past the watermark (every
    event a live writer wrote before that time was read), ``upper_time_bound`` while it is
    before it (what it reads now was written before that time). ``None`` where unknown: no
    watermark yet, or the reader holds no segment of the stream."""

    lower_time_bound: int | None
    upper_time_bound: int | None


def time_window(watermark: dict[str, Any] | None, position: dict[int, int]) -> TimeWindow:
    """The window of a reader at ``position`` ({segment id: offset} of the segments it holds)
    against ``watermark`` (REST's form). A held segment the watermark's cut lacks is after it
    when it was created in a later epoch than every segment of the cut, else before it."""
    if watermark is None or not position:
        return TimeWindow(None, None)
    cut = {int(k): int(v) for k, v in watermark["streamCut"].items()}
    newest_epoch = max((segment_epoch(sid) for sid in cut), default=0)
    past = all(
        offset >= cut[sid] if sid in cut else segment_epoch(sid) > newest_epoch
        for sid, offset in position.items()
    )
    if past:
        return TimeWindow(int(watermark["lowerTimeBound"]), None)
    return TimeWindow(None, int(watermark["upperTimeBound"]))


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
        self.path = paths.reader_group(scope, name)

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
        reader_timeout_ms: int = defaults.READER_TIMEOUT_MS,
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
        await controller.call("POST", paths.reader_groups(scope), body)
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
        await self.controller.call(
            "POST", paths.reader_group_checkpoints(self.scope, self.name), {"checkpointName": name}
        )
        deadline = asyncio.get_running_loop().time() + timeout
        # Asked often at first (readers hand the marker out within ms when they are reading),
        # then less, up to once every CHECKPOINT_POLL_MAX_S (a reader's next read may be far).
        pause = 0.05
        while True:
            status = await self.controller.call(
                "GET", paths.reader_group_checkpoint(self.scope, self.name, name)
            )
            if status["complete"]:
                return {
                    scoped: _cut_of(scoped, cut) for scoped, cut in status["streamCuts"].items()
                }
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(
                    f"checkpoint {name} still waits for readers {status['pendingReaders']}"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, CHECKPOINT_POLL_MAX_S)

    async def reset(self, streams: dict[str, str | StreamCut] | None = None) -> None:
        """Read again from ``streams``' starts (default: the configured ones). Every reader
        drops what it holds and reads on from the new positions."""
        body = {} if streams is None else {
            "streams": {s: _start_of(s, v) for s, v in streams.items()}
        }  # fmt: skip
        await self.controller.call("POST", paths.reader_group_reset(self.scope, self.name), body)

    async def update_retention_stream_cut(self, cuts: dict[str, StreamCut]) -> None:
        body = {"streamCuts": {s: c.to_text() for s, c in cuts.items()}}
        await self.controller.call(
            "PUT", paths.reader_group_subscriber_cuts(self.scope, self.name), body
        )

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
    #: What was read and not handed out: lists of events (as each read gave them) and
    #: truncation notices, in order.
    buffer: deque[list[EventRead] | TruncatedDataError] = field(default_factory=deque)
    #: Bytes of the events in ``buffer``, their headers counted.
    buffered_bytes: int = 0
    room: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    #: The end offset once the segment was read to its end (sealed).
    end: int | None = None
    #: Events of it in the last ``read_batch`` not yet known to be handed to the application.
    uncommitted: int = 0
    #: The offset after the last event taken into a batch (handed to the application, or
    #: waiting in the blocking reader's local batch, which will hand it out).
    taken_to: int = 0

    @property
    def fully_handed_out(self) -> bool:
        return self.end is not None and not self.buffer and not self.uncommitted


def _take_run(buffer: deque[list[EventRead] | TruncatedDataError], count: int) -> list[EventRead]:
    """Up to ``count`` events from the front of a segment's buffer (which starts with events),
    up to a truncation notice: whole lists where they fit (no copy), a part of the last."""
    run: list[EventRead] = []
    while buffer and count > 0:
        head = buffer[0]
        if isinstance(head, TruncatedDataError):
            break
        if len(head) <= count:
            buffer.popleft()
            count -= len(head)
            if run:
                run.extend(head)
            else:
                run = head
        else:
            run.extend(head[:count])
            del head[:count]
            count = 0
    return run


class SegmentSlice:
    """Events of one segment, as a reader hands them out at once (``read_slice``); iterating
    counts the events used (``release_segment`` hands the count back)."""

    def __init__(self, segment: str, events: list[EventRead]) -> None:
        self.segment = segment
        self.events = events
        #: Events iterated so far.
        self.used = 0

    def __iter__(self) -> Iterator[EventRead]:
        for event in self.events:
            self.used += 1
            yield event

    def __len__(self) -> int:
        return len(self.events)

    def __repr__(self) -> str:
        return f"SegmentSlice({self.segment!r}, {len(self.events)} events, {self.used} used)"


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
        #: The last ``read_batch``'s runs: (segment key, index of its first event in the batch,
        #: its events), their positions not yet counted as handed out (see ``_commit``).
        self._runs: list[tuple[str, int, list[EventRead]]] = []
        self._one_segment = False

    @property
    def _base(self) -> str:
        return paths.reader_group_reader(self.group.scope, self.group.name, self.reader_id)

    def position(self, stream: str) -> dict[int, int]:
        """``{segment id: offset}`` of the segments of ``stream`` ("scope/name") this reader
        holds: after the last event taken from each."""
        found = {}
        for segment in self._segments.values():
            scope, name, segment_id = parse_segment_name(segment.name)
            if f"{scope}/{name}" == stream:
                found[segment_id] = max(segment.taken_to, segment.delivered)
        return found

    async def current_time_window(
        self, stream: str, position: dict[int, int] | None = None
    ) -> TimeWindow:
        """Where this reader stands in event time on ``stream`` ("scope/name"), by the
        stream's newest watermark (``TimeWindow``); Pravega's ``getCurrentTimeWindow``."""
        scope, _, name = stream.partition("/")
        watermark = await self.group.controller.watermark(scope, name)
        return time_window(watermark, self.position(stream) if position is None else position)

    async def join(self) -> None:
        answer = await self.group.controller.call(
            "POST",
            paths.reader_group_readers(self.group.scope, self.group.name),
            {"readerId": self.reader_id},
        )
        self._generation = answer["generation"]
        self._refresh = answer["groupRefreshTimeMs"] / 1000
        self._pool = SegmentStorePool(ssl=self.group.controller.tls)
        self._sync_task = asyncio.get_running_loop().create_task(self._sync_loop())

    # -- handing out events --------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Every stream of the group is sealed and was read to its end by the group."""
        return self._finished and not self._segments

    def _traced(self, count: int) -> None:
        """A receive span for a batch handed out (when tracing is on)."""
        group = self.group
        attributes = traces.messaging(
            "receive", group.scope, group.name, **{"messaging.batch.message_count": count,
                                                   "messaging.consumer.group.name": group.name},
        )  # fmt: skip
        with traces.span(f"receive {group.scope}/{group.name}", "consumer", **attributes):
            pass

    async def read_next(self, timeout: float | None = None) -> EventRead | None:
        """The next event or a checkpoint marker (``is_checkpoint``); ``None`` if nothing
        comes within ``timeout`` s, or once every stream of the group is sealed and read
        (``finished`` then says so). ``TruncatedDataError`` once where data was truncated
        away."""
        batch = await self.read_batch(1, timeout)
        return batch[0] if batch else None

    async def read_batch(
        self, max_events: int = 4096, timeout: float | None = None
    ) -> list[EventRead]:
        """Up to ``max_events`` events buffered now (waiting up to ``timeout`` s for the first
        one), or a list holding only a checkpoint marker; empty if nothing came in time or
        once ``finished``. The events of a batch count as handed out to the application when
        the next ``read_next``, ``read_batch`` or ``close`` comes (a reader that dies before
        leaves them to be read again)."""
        if max_events < 1:
            raise ValueError(f"max_events must be at least 1, not {max_events}")
        self._commit()
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
                return [EventRead("", 0, b"", checkpoint_name=name)]
            batch = self._take_buffered(max_events)
            if batch:
                self._traced(len(batch))
                return batch
            if self.finished:
                return []
            self._data.clear()
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return []
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._data.wait(), left)

    async def read_slice(
        self, max_events: int = 4096, timeout: float | None = None
    ) -> SegmentSlice | None:
        """Up to ``max_events`` events of one segment (the official Python client's segment
        slice), or ``None`` if none came within ``timeout`` s or once ``finished``. Its
        events count as handed out when ``release_segment`` says how many were used, or in
        full when the next read comes first. Checkpoint markers are acknowledged, not
        handed out."""
        if max_events < 1:
            raise ValueError(f"max_events must be at least 1, not {max_events}")
        while True:
            self._one_segment = True
            try:
                batch = await self.read_batch(max_events, timeout)
            finally:
                self._one_segment = False
            if not batch:
                return None
            if not batch[0].is_checkpoint:
                return SegmentSlice(batch[0].segment, batch)

    def release_segment(self, piece: SegmentSlice) -> None:
        """The events of ``piece`` that were iterated were handed out (the rest are read
        again, by this reader or another)."""
        if self._runs and self._runs[0][2] is piece.events:
            self._commit(piece.used)

    def _take_buffered(self, count: int) -> list[EventRead]:
        """Up to ``count`` buffered events, a run from each segment in turn (of one segment
        only while ``_one_segment``); their positions count once committed. A truncation
        met first is raised (after one met later, the batch ends)."""
        batch: list[EventRead] = []
        runs = self._runs
        for _ in range(len(self._turn)):
            if len(batch) >= count:
                break
            key = self._turn[0]
            self._turn.rotate(-1)
            segment = self._segments.get(key)
            if segment is None or not segment.buffer:
                continue
            buffer = segment.buffer
            if isinstance(buffer[0], TruncatedDataError):
                if batch:
                    break
                item = buffer.popleft()
                assert isinstance(item, TruncatedDataError)
                segment.delivered = max(segment.delivered, item.resume_offset)
                if segment.fully_handed_out:
                    self._sync_now.set()
                raise item
            run = _take_run(buffer, count - len(batch))
            segment.buffered_bytes -= run[-1].next_offset - run[0].offset  # (headers too)
            segment.uncommitted += len(run)
            segment.taken_to = run[-1].next_offset
            segment.room.set()
            runs.append((key, len(batch), run))
            if self._one_segment:
                return run  # (the list itself: a segment slice is known by it)
            batch.extend(run)
        return batch

    @property
    def checkpoint_pending(self) -> bool:
        """A checkpoint marker waits to be handed out."""
        return self._checkpoint_due is not None

    async def checkpoint_now(self, handed: int) -> EventRead | None:
        """For a reader that hands out the last batch one event at a time (the blocking one):
        it has handed out the first ``handed`` events of it (counted since the last call);
        their positions count now, the rest's later, and the checkpoint marker due (if any)
        comes now rather than after the rest of the batch."""
        kept: list[tuple[str, int, list[EventRead]]] = []
        for key, first, run in self._runs:
            taken = min(len(run), max(handed - first, 0))
            segment = self._segments.get(key)
            if segment is not None and taken:
                segment.uncommitted -= taken
                segment.delivered = max(segment.delivered, run[taken - 1].next_offset)
            if taken < len(run):
                kept.append((key, max(first - handed, 0), run[taken:]))
        self._runs = kept
        if self._checkpoint_due is None:
            return None
        name, self._checkpoint_due = self._checkpoint_due, None
        self._checkpoint_ack = (name, {k: s.delivered for k, s in self._segments.items()})
        self._sync_now.set()
        return EventRead("", 0, b"", checkpoint_name=name)

    def _commit(self, handed: int | None = None) -> None:
        """The events of the last batch (its first ``handed`` only, if given) were handed to
        the application: their segments' positions move past them."""
        runs, self._runs = self._runs, []
        for key, first, run in runs:
            segment = self._segments.get(key)
            if segment is None:  # released or dropped meanwhile: read again elsewhere
                continue
            segment.uncommitted -= len(run)
            taken = len(run) if handed is None else min(len(run), max(handed - first, 0))
            if taken:
                segment.delivered = max(segment.delivered, run[taken - 1].next_offset)
            if segment.fully_handed_out:
                self._sync_now.set()  # its successors may be waiting for it

    # -- reading segments ----------------------------------------------------------------------

    async def _token(self, scope: str, stream: str) -> str:
        scoped = f"{scope}/{stream}"
        if scoped not in self._tokens:
            self._tokens[scoped] = await self.group.controller.delegation_token(scope, stream)
        return self._tokens[scoped]

    async def _fetch(self, segment: _Segment, scope: str, stream: str) -> None:
        assert self._pool is not None
        token = await self._token(scope, stream)
        splitter = EventSplitter(segment.delivered, segment.name)
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
                splitter = EventSplitter(exc.start_offset, segment.name)
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
                with contextlib.suppress(Exception):  # its container may have moved
                    segment.host, segment.port = await self.group.controller.segment_node(
                        segment.name
                    )
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
                segment.buffer.append(events)
                segment.buffered_bytes += events[-1].next_offset - events[0].offset
                self._data.set()
            if result.end_of_segment and not result.data:
                segment.end = splitter.offset
                self._sync_now.set()
                return

    def _hold(self, where: dict[str, Any]) -> None:
        key = where["key"]
        if key in self._segments:
            return  # (given again, though this reader reported it: nothing to start)
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
        # (safe to send again: a sync whose answer was lost gives its segments again)
        answer = await self.group.controller.call(
            "POST",
            paths.reader_group_reader(self.group.scope, self.group.name, self.reader_id, "sync"),
            body,
            changes=False,
        )
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
            # (past what went into a batch too: this reader hands those out, another must
            # not read them again)
            self._released[segment.key] = max(segment.delivered, segment.taken_to)
        self._sync_now.set()

    # -- leaving -------------------------------------------------------------------------------

    async def close(self, handed: int | None = None) -> None:
        """Leave the group: the segments go back at the positions handed out (of the last
        batch, its first ``handed`` events only, if given: the blocking reader's)."""
        if self._closed:
            return
        self._commit(handed)
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
