"""Event writers: routing keys to segments, idempotent appends, following scaling.

``AsyncEventWriter.write_event(event, routing_key)`` hashes the key to a point of the key
space, appends the event to the current segment that owns the point (batched into append
blocks by the segment store client) and returns a future completed once the event is durable.
Each segment gets its own writer id, so the segment store drops a re-sent duplicate. When a
segment is sealed (the stream scaled), every event not yet acknowledged on it is re-routed, in
the order written, to the segments that replaced it (asked of the controller), so the events of
one key stay in order. Events are held until acknowledged: ``pending_events_max`` bounds that
memory (``write_event`` waits for room: back-pressure). ``write_event`` itself only queues the
event on its segment's writer; a shipping task per segment writer hands everything queued
meanwhile to the segment store client in one call (one future per batch, not per event).

A lost connection to the segment store (the node restarted, say), one given up as silent (a
partitioned or paused node: ``millrace.client.transport.connection``) or a WrongHost (the
container moved) is set up again where the controller says the segment is served now, with a
growing delay, until the delivery timeout; the writer's setup tells the last event number the
segment store persisted, the events up to it are complete and the rest are sent again, in
order, under the same numbers: no loss, no duplicate. A segment in trouble holds back only its
own events (``write_batch_parts`` answers per segment). The delegation token (10 minutes) is
fetched again from the controller when the segment store says it has expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from millrace.client.controller import AsyncControllerClient
from millrace.client.inflight import InFlight
from millrace.client.retry import with_retries
from millrace.client.routing import KeySpace, SegmentWithRange, key_point, replace_sealed
from millrace.client.transport import segment_store as ssc
from millrace.client.transport.pool import SegmentStorePool
from millrace.kernel import defaults, traces

log = logging.getLogger("millrace.client")

#: Pause before a writer whose appends were answered "not served here" sets up again.
OFFLINE_RETRY_PAUSE_S = 0.5
#: ``write_event`` yields to the event loop after queuing this many events, so that batches
#: are shipped while the producer goes on.
YIELD_EVERY = 512


@dataclass(slots=True)
class _Pending:
    """One event (``data``), or several of one routing key (``group``), with one future."""

    data: bytes
    point: float
    done: asyncio.Future[None]
    #: The event number the segment store knows it (its first event) by, per segment writer.
    number: int = 0
    group: list[bytes] | None = None
    #: Events it counts for in the writer's unacknowledged total.
    weight: int = 1
    #: The routing key of each event of ``group`` when they differ (``write_batch``): a
    #: re-routing after a scale sends each to the successor owning its key.
    keys: list[str | None] | None = None

    @property
    def count(self) -> int:
        return 1 if self.group is None else len(self.group)


def _as_bytes(event: bytes | bytearray | memoryview | str) -> bytes:
    return event.encode("utf-8") if isinstance(event, str) else bytes(event)


@dataclass(eq=False)
class _SegmentWriter:
    segment: SegmentWithRange
    client: ssc.SegmentStoreClient
    node: tuple[str, int]
    writer_id: uuid.UUID = field(default_factory=uuid.uuid4)
    #: Sent or not, not yet acknowledged, in event-number order.
    pending: deque[_Pending] = field(default_factory=deque)
    #: The tail of ``pending`` not yet handed to the segment store client.
    unsent: list[_Pending] = field(default_factory=list)
    shipping: bool = False
    sealed: bool = False
    reconnecting: bool = False
    next_number: int = 1
    #: The segment's length after this writer's last acknowledged append (its position).
    acked_offset: int = 0
    #: Since when (loop time) the segment store refuses this writer's appends, and why: set
    #: at the first refusal, cleared by the next acknowledgement.
    refused_since: float | None = None
    refused_why: str = ""
    #: Since when (loop time) the writer's appends are in any trouble (refused, connection lost
    #: or silent): the delivery timeout counts from here; cleared by the next acknowledgement.
    trouble_since: float | None = None

    def note_trouble(self, error: Exception) -> float:
        """Mark since when its appends are in trouble (and refused, for a WrongHost: ``error``
        is a ``ContainerOfflineError``); the pause before setting it up again."""
        now = asyncio.get_running_loop().time()
        if self.trouble_since is None:
            self.trouble_since = now
        if not isinstance(error, ssc.ContainerOfflineError):
            return 0.0
        if self.refused_since is None:
            self.refused_since = now
        self.refused_why = str(error)
        return OFFLINE_RETRY_PAUSE_S

    def timed_out(
        self, timeout_s: float, error: Exception | None = None
    ) -> ssc.DeliveryTimeoutError:
        """What its events fail with after ``timeout_s`` of trouble: the last refusal, else
        the last ``error``."""
        why = self.refused_why if self.refused_since is not None or error is None else error
        return ssc.DeliveryTimeoutError(
            f"events to {self.segment.name} not acknowledged within the delivery timeout of"
            f" {timeout_s:g} s; the last answer: {why}"
        )


_Groups = dict[_SegmentWriter, tuple[list[bytes], list[str | None]]]


@dataclass(frozen=True, slots=True)
class BatchPart:
    """The events of one segment in a ``write_batch_parts`` call."""

    #: Completed once they are durable (or failed).
    done: asyncio.Future[None]
    #: How many, and their bytes.
    events: int
    size: int
    #: Their routing keys, in order.
    keys: list[str | None]


def _route_batch(
    routes: dict[str, _SegmentWriter],
    keyspace: KeySpace | None,
    writers: dict[int, _SegmentWriter],
    events: Sequence[bytes],
    keys: Sequence[str | None],
) -> _Groups | None:
    """The events by the writer of their segment, in order (``routes``: the writers of the
    routing keys seen, filled in on the way); ``None`` if a segment has no writer yet."""
    assert keyspace is not None
    groups: _Groups = {}
    for data, key in zip(events, keys):  # noqa: B905 (checked by write_batch)
        writer = routes.get(key) if key is not None else None
        if writer is None:
            point = key_point(key) if key is not None else random.random()
            writer = writers.get(keyspace.segment_for(point).segment_id)
            if writer is None:
                return None
            if key is not None:
                routes[key] = writer
        group = groups.get(writer)
        if group is None:
            group = groups[writer] = ([], [])
        group[0].append(data if type(data) is bytes else _as_bytes(data))
        group[1].append(key)
    return groups


def _all_done(futures: list[asyncio.Future[None]]) -> asyncio.Future[None]:
    """A future done once all of ``futures`` are (the first error or cancellation at once):
    a gather with no task."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left = len(futures)

    def one_done(item: asyncio.Future[None]) -> None:
        nonlocal left
        left -= 1
        if done.done():
            return
        if item.cancelled():
            done.cancel()
        elif (error := item.exception()) is not None:
            done.set_exception(error)
        elif not left:
            done.set_result(None)

    for future in futures:
        future.add_done_callback(one_done)
    return done


def _delivery_timeout(seconds: float) -> float:
    if not 0 < seconds <= 86_400:
        raise ValueError(f"delivery_timeout_s must be within (0, 86400], not {seconds}")
    return seconds


async def _send_open_blocks(writers: dict[int, _SegmentWriter]) -> None:
    """Send the segment writers' open blocks now (``flush``)."""
    for writer in list(writers.values()):
        if not writer.sealed:
            with contextlib.suppress(ssc.SegmentStoreError):  # failures reach the futures
                await writer.client.flush(writer.writer_id)


def _take_unpersisted(
    writer: _SegmentWriter, last: int, complete: Callable[[_Pending], None]
) -> list[_Pending]:
    """Empty ``writer``'s queues: ``complete`` the events the segment store has (numbers up to
    ``last``) and return the others in order, a group cut to its events after ``last``."""
    items, writer.pending, writer.unsent = list(writer.pending), deque(), []
    left: list[_Pending] = []
    for item in items:
        if item.number + item.count - 1 <= last:
            complete(item)  # stored (its ack was lost, or came for a later block)
        elif not item.done.done():
            if item.number <= last and item.group is not None:
                del item.group[: last - item.number + 1]  # the rest of a group
                if item.keys is not None:
                    del item.keys[: last - item.number + 1]
            left.append(item)
    return left


class _Tasks:
    """A writer's reconnects and re-routings under way, each a task of its own that never dies
    unheard: whatever one raises is logged and handed to ``failed`` with its segment writer
    (which fails the writer's pending events with it)."""

    def __init__(self, failed: Callable[[_SegmentWriter, BaseException], None]) -> None:
        self._failed = failed
        self._running: set[asyncio.Task[None]] = set()

    def spawn(self, writer: _SegmentWriter, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._running.add(task)
        task.add_done_callback(lambda t: self._done(writer, t))

    def _done(self, writer: _SegmentWriter, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if task.cancelled() or (error := task.exception()) is None:
            return
        log.warning("millrace client: the writer of %s gave up: %r", writer.segment.name, error)
        self._failed(writer, error)


async def _successors(
    controller: AsyncControllerClient, scope: str, stream: str, segment: SegmentWithRange
) -> list[SegmentWithRange] | None:
    """The segments that replaced the sealed ``segment`` (asked again for a minute while the
    scale may still be completing in the controller); ``None``: the stream itself is sealed."""
    successors: list[tuple[SegmentWithRange, list[int]]] = []
    for _ in range(600):
        successors = await controller.successors(scope, stream, segment.segment_id)
        if successors:
            break
        if not await controller.current_segments(scope, stream):
            return None
        await asyncio.sleep(0.1)
    return [s for s, _ in successors]


def _split_by_segment(item: _Pending, keyspace: KeySpace) -> list[_Pending]:
    """A batch item whose events have their own keys, as one new item per segment now owning
    some of its keys (each with its events in order, and a future of its own)."""
    assert item.group is not None and item.keys is not None
    parts: dict[int, _Pending] = {}
    for data, key in zip(item.group, item.keys, strict=True):
        point = key_point(key)
        segment = keyspace.segment_for(point)
        part = parts.get(segment.segment_id)
        if part is None:
            future = asyncio.get_running_loop().create_future()
            part = parts[segment.segment_id] = _Pending(
                b"", point, future, group=[], weight=0, keys=[]
            )
        part.group.append(data)  # type: ignore[union-attr]
        part.keys.append(key)  # type: ignore[union-attr]
    return list(parts.values())


async def set_up_appends(
    where: tuple[AsyncControllerClient, SegmentStorePool, str, str],
    segment: SegmentWithRange,
    writer_id: uuid.UUID,
    since: float | None,
    timeout_s: float,
) -> tuple[ssc.SegmentStoreClient, int, tuple[str, int]]:
    """Find the segment's node (the controller's ``segment_uri``, Pravega's getURI), connect
    (``where``: the controller, the pool, the scope and the stream) and set up appends of
    ``writer_id``; the client, the writer's last persisted event number and the node. While the
    node is away, silent or answers WrongHost (its container moved, or is restarting), or the
    controller is away, look the node up again and retry with a growing pause, until
    ``timeout_s`` after ``since`` (default: now); then the last error is raised."""
    controller, pool, scope, stream = where

    async def attempt() -> tuple[ssc.SegmentStoreClient, int, tuple[str, int]]:
        node = await controller.segment_uri(scope, stream, segment.segment_id)
        client = await pool.get(*node)
        return client, await client.setup_append(segment.name, writer_id), node

    return await with_retries(attempt, timeout_s=timeout_s, since=since)


class AsyncEventWriter:
    """Writes events to one stream (create it with ``StreamManager.create_writer``)."""

    def __init__(
        self,
        controller: AsyncControllerClient,
        scope: str,
        stream: str,
        *,
        pending_events_max: int = 100_000,
        limits: ssc.AppendLimits | None = None,
        delivery_timeout_s: float = defaults.DELIVERY_TIMEOUT_SECONDS,
    ) -> None:
        self.controller = controller
        self.scope, self.stream = scope, stream
        self.pending_events_max = pending_events_max
        #: Events refused this long (seconds) fail with ``DeliveryTimeoutError``.
        self.delivery_timeout_s = _delivery_timeout(delivery_timeout_s)
        #: How the segment store client batches this writer's appends into blocks
        #: (``None``: its defaults).
        self.limits = limits
        self._pool: SegmentStorePool | None = None
        self._keyspace: KeySpace | None = None
        self._writers: dict[int, _SegmentWriter] = {}
        #: The segment writer of each routing key seen (``write_batch``), while the key space
        #: stays the same (cleared when it changes).
        self._routes: dict[str, _SegmentWriter] = {}
        self._lock = asyncio.Lock()  # routing and re-routing never interleave
        #: Events written and not yet acknowledged (or failed): back-pressure, ``flush``.
        self._held = InFlight(pending_events_max)
        self._queued = 0  # events queued since the producer last yielded to the loop
        self._loop: asyncio.AbstractEventLoop | None = None  # set by _start, in the loop
        #: Segments found sealed under this writer, whose unacknowledged events were re-routed.
        self.reroutes = 0
        #: Connections to the segment store re-opened after being lost.
        self.reconnects = 0
        #: The name this writer's marks are reported under (``note_time``).
        self.writer_id = uuid.uuid4().hex
        #: Whether each ``flush`` reports a mark by itself: the stream sets
        #: ``timestampAggregationTimeout`` (read when the writer starts).
        self.automatic_marks = False
        #: Why this writer gave up (``abandon``): every event queued after fails with it.
        self._abandoned: Exception | None = None
        #: Its reconnects and re-routings under way.
        self._tasks = _Tasks(self._gave_up)

    def refusal(self) -> str | None:
        """Why the segment store refuses this writer's appends now (its last answer), if it
        does: the writer sends them again until its delivery timeout."""
        refused = (w.refused_why for w in self._writers.values() if w.refused_since is not None)
        return next(refused, None)

    async def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        options = {} if self.limits is None else {"limits": self.limits}
        self._pool = await SegmentStorePool.for_stream(
            self.controller, self.scope, self.stream, **options
        )
        segments = await self.controller.current_segments(self.scope, self.stream)
        if not segments:
            raise ssc.SegmentSealedError(f"stream {self.scope}/{self.stream} is sealed")
        config = await self.controller.stream_config(self.scope, self.stream)
        self.automatic_marks = bool(config.get("timestampAggregationTimeout"))
        self._keyspace = KeySpace(segments)

    async def _writer_for(self, segment: SegmentWithRange) -> _SegmentWriter:
        writer = self._writers.get(segment.segment_id)
        if writer is None:
            assert self._pool is not None
            writer_id = uuid.uuid4()
            client, last, node = await self._setup(segment, writer_id)
            writer = _SegmentWriter(segment, client, node, writer_id=writer_id)
            writer.next_number = max(last, 0) + 1
            self._writers[segment.segment_id] = writer
        return writer

    async def _setup(
        self, segment: SegmentWithRange, writer_id: uuid.UUID, since: float | None = None
    ) -> tuple[ssc.SegmentStoreClient, int, tuple[str, int]]:
        assert self._pool is not None
        where = (self.controller, self._pool, self.scope, self.stream)
        return await set_up_appends(where, segment, writer_id, since, self.delivery_timeout_s)

    async def write_event(
        self, event: bytes | str, routing_key: str | None = None
    ) -> asyncio.Future[None]:
        """Queue ``event``; the returned future completes when it is durable. Waits only when
        ``pending_events_max`` events are unacknowledged (back-pressure) or while the writer
        re-routes after a scale."""
        data = event.encode("utf-8") if isinstance(event, str) else bytes(event)
        keyspace = self._keyspace
        held = self._held
        if keyspace is None or held.count >= held.limit or self._lock.locked():
            return await self._submit(data, None, routing_key)
        point = key_point(routing_key)
        writer = self._writers.get(keyspace.segment_for(point).segment_id)
        if writer is None:
            return await self._submit(data, None, routing_key)
        # The fast path: a known segment, room, no re-routing.
        held.add()
        item = _Pending(data, point, self._loop.create_future())  # type: ignore[union-attr]
        self._enqueue(writer, item)
        self._queued += 1
        if self._queued >= YIELD_EVERY:
            # Let the shipping tasks hand over what is queued while this producer goes on,
            # so the segment store works on one batch while the next is being queued.
            self._queued = 0
            await asyncio.sleep(0)
        return item.done

    async def write_events(
        self, events: list[bytes | str], routing_key: str | None = None
    ) -> asyncio.Future[None]:
        """Queue ``events``, all of ``routing_key``, in order (Pravega's ``writeEvents``): one
        call and one future for all of them, completed when every one is durable."""
        group = [e.encode("utf-8") if isinstance(e, str) else bytes(e) for e in events]
        if not group:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return await self._submit(b"", group, routing_key)

    async def write_batch(
        self, events: Sequence[bytes], keys: Sequence[str | None]
    ) -> asyncio.Future[None]:
        """Queue ``events[i]`` under routing key ``keys[i]`` for every ``i``, per key in order;
        one future for all of them, completed when every one is durable (or failed with the
        first error)."""
        parts = await self.write_batch_parts(events, keys)
        return _all_done([part.done for part in parts])

    async def write_batch_parts(
        self, events: Sequence[bytes], keys: Sequence[str | None]
    ) -> list[BatchPart]:
        """``write_batch``, answered per segment: a ``BatchPart`` for the events of each
        segment, completed when those are durable, so that one segment's stall holds back only
        its own events (the blocking writer hands its buffer over through this, a batch at a
        time: nothing is made per event but the routing, one dict lookup for a key seen
        before)."""
        if len(events) != len(keys):
            raise ValueError(f"{len(events)} events but {len(keys)} routing keys")
        if not events:
            return []
        await self._held.wait_for_room()
        if self._keyspace is None or self._lock.locked():
            async with self._lock:
                return await self._write_batch_locked(events, keys)
        groups = self._groups(events, keys)
        if groups is None:  # a segment without its writer yet
            async with self._lock:
                return await self._write_batch_locked(events, keys)
        return self._enqueue_groups(groups)

    async def _write_batch_locked(
        self, events: Sequence[bytes], keys: Sequence[str | None]
    ) -> list[BatchPart]:
        """``write_batch`` under the routing lock: start, and set up the segments' writers."""
        if self._keyspace is None:
            await self._start()
        while (groups := self._groups(events, keys)) is None:
            assert self._keyspace is not None
            for key in set(keys):
                point = key_point(key)
                if key is None:  # (any segment: make sure every one has its writer)
                    for segment in self._keyspace.segments:
                        await self._writer_for(segment)
                else:
                    await self._writer_for(self._keyspace.segment_for(point))
        return self._enqueue_groups(groups)

    def _groups(self, events: Sequence[bytes], keys: Sequence[str | None]) -> _Groups | None:
        return _route_batch(self._routes, self._keyspace, self._writers, events, keys)

    def _enqueue_groups(self, groups: _Groups) -> list[BatchPart]:
        """One item per segment writer, and its part of the batch."""
        parts = []
        for writer, (data, keys) in groups.items():
            weight = len(data)
            item = _Pending(b"", 0.0, self._held.new_future(weight), group=data, weight=weight)
            item.keys = keys
            parts.append(BatchPart(item.done, weight, sum(map(len, data)), keys))
            self._enqueue(writer, item)
        return parts

    async def _submit(
        self, data: bytes, group: list[bytes] | None, routing_key: str | None
    ) -> asyncio.Future[None]:
        await self._held.wait_for_room()
        if self._keyspace is None:
            async with self._lock:
                if self._keyspace is None:
                    await self._start()
        assert self._keyspace is not None
        point = key_point(routing_key)
        weight = 1 if group is None else len(group)
        item = _Pending(data, point, self._held.new_future(weight), group=group, weight=weight)
        writer = self._writers.get(self._keyspace.segment_for(point).segment_id)
        if writer is not None and not self._lock.locked():
            self._enqueue(writer, item)
            return item.done
        try:
            # A new segment to set up, or a re-routing under way: in turn, after those.
            async with self._lock:
                await self._send(item)
        except BaseException:
            self._held.forget(item)
            raise
        return item.done

    async def _send(self, item: _Pending) -> None:
        assert self._keyspace is not None
        self._enqueue(await self._writer_for(self._keyspace.segment_for(item.point)), item)

    def _enqueue(self, writer: _SegmentWriter, item: _Pending) -> None:
        """Number ``item`` for ``writer`` and queue it; the writer's shipping task hands the
        queued events to the segment store client together (one append-block call)."""
        if self._abandoned is not None:  # a re-route that was under way when it gave up
            self._held.complete(item, self._abandoned)
            return
        item.number = writer.next_number
        writer.next_number += 1 if item.group is None else len(item.group)
        writer.pending.append(item)
        writer.unsent.append(item)
        if not writer.shipping and not writer.reconnecting:
            writer.shipping = True
            asyncio.get_running_loop().create_task(self._ship(writer))

    async def _ship(self, writer: _SegmentWriter) -> None:
        try:
            await asyncio.sleep(0)  # let the caller queue more first
            while writer.unsent and not writer.reconnecting and not writer.sealed:
                batch, writer.unsent = writer.unsent, []
                payload: list[bytes] = []
                for item in batch:
                    if item.group is None:
                        payload.append(item.data)
                    else:
                        payload.extend(item.group)
                client = writer.client
                try:
                    ack = await client.append_block(writer.writer_id, payload)
                except ssc.SegmentSealedError:
                    if not writer.sealed:
                        writer.sealed = True
                        await self._reroute_locked(writer)
                    return
                except (ssc.ConnectionLostError, ssc.ContainerOfflineError) as exc:
                    # Raised while sending (the session failed, or its connection went, before
                    # this call): the same as when an acknowledgement says so. The events stay
                    # in ``pending``; the reconnect sends them again.
                    if writer.client is client:
                        self._trouble(writer, exc)
                        return
                    # A reconnect replaced the connection while this call waited on the old
                    # one; it queued every pending event again (renumbered, in order): go on
                    # with those on the new connection. Reconnecting a second time here would
                    # renumber them again while the new connection may already have sent
                    # some, and a later event could be stored before an earlier one.
                    continue
                ack.add_done_callback(lambda f, b=batch: self._acked(writer, b, f))  # type: ignore[misc]
        finally:
            writer.shipping = False

    def _acked(
        self, writer: _SegmentWriter, batch: list[_Pending], ack: asyncio.Future[ssc.AppendAck]
    ) -> None:
        error = asyncio.CancelledError() if ack.cancelled() else ack.exception()
        if error is None:
            writer.refused_since = writer.trouble_since = None
            offset = ack.result().segment_write_offset
            if offset > writer.acked_offset:
                writer.acked_offset = offset
            for item in batch:
                if writer.pending and writer.pending[0] is item:
                    writer.pending.popleft()
                elif item in writer.pending:
                    writer.pending.remove(item)
                self._held.complete(item)
        elif isinstance(error, ssc.SegmentSealedError):
            if not writer.sealed:
                writer.sealed = True
                self._tasks.spawn(writer, self._reroute_locked(writer))
        elif isinstance(error, ssc.ConnectionLostError | ssc.ContainerOfflineError):
            if writer.client.is_closed or isinstance(error, ssc.ContainerOfflineError):
                self._trouble(writer, error)  # (else: a late failure of the old connection)
        else:
            for item in batch:
                if item in writer.pending:
                    writer.pending.remove(item)
                self._held.complete(item, error)

    def _trouble(self, writer: _SegmentWriter, error: Exception) -> None:
        """``writer``'s connection was lost (or given up as silent) or its segment is not
        served there now (WrongHost: the container moved, restarts, or refuses appends while
        its tier-2 is far behind or its disk nearly full): set the writer up again, where the
        controller says the segment is now, and send what is not persisted, until the delivery
        timeout counted from the first trouble since the last acknowledgement."""
        self._schedule_reconnect(writer, writer.note_trouble(error))

    def _schedule_reconnect(self, writer: _SegmentWriter, pause: float = 0.0) -> None:
        if not writer.reconnecting and not writer.sealed:
            writer.reconnecting = True
            self._tasks.spawn(writer, self._reconnect(writer, pause))

    def _gave_up(self, writer: _SegmentWriter, error: BaseException) -> None:
        """A reconnect or re-routing of ``writer`` raised: its pending events fail with it."""
        writer.reconnecting = False
        self._writers.pop(writer.segment.segment_id, None)
        self._routes = {}
        self._fail_all(writer, error)

    async def _reconnect(self, writer: _SegmentWriter, pause: float = 0.0) -> None:
        """The connection to the segment store was lost (or the segment was not served): open
        a new one, ask the segment store for this writer's last persisted event number (the
        idempotent writer's setup), complete the events up to it, and send the rest again in
        order (never twice: the numbers are the same)."""
        if pause:
            await asyncio.sleep(pause)
        since = writer.trouble_since
        if since is not None and asyncio.get_running_loop().time() - since > (
            self.delivery_timeout_s
        ):  # (set up each time, but refused each time: a disk nearly full, say)
            writer.reconnecting = False
            self._fail_all(writer, writer.timed_out(self.delivery_timeout_s))
            writer.refused_since = writer.trouble_since = None
            return
        try:
            client, last, writer.node = await self._setup(writer.segment, writer.writer_id, since)
        except ssc.SegmentSealedError:
            writer.reconnecting = False
            await self._reroute_locked(writer)
            return
        except Exception as exc:
            writer.reconnecting = False
            self._writers.pop(writer.segment.segment_id, None)
            self._routes = {}
            self._fail_all(writer, writer.timed_out(self.delivery_timeout_s, exc))
            return
        async with self._lock:
            writer.client = client
            self.reconnects += 1
            items = _take_unpersisted(writer, last, self._held.complete)
            writer.next_number = max(last, 0) + 1
            writer.reconnecting = False
            for item in items:
                self._enqueue(writer, item)

    async def _reroute_locked(self, writer: _SegmentWriter) -> None:
        async with self._lock:
            await self._reroute(writer)

    async def _reroute(self, writer: _SegmentWriter) -> None:
        """``writer``'s segment is sealed: send its unacknowledged events, in order, to the
        segments that replaced it."""
        writer.sealed = True
        self.reroutes += 1
        self._writers.pop(writer.segment.segment_id, None)
        successors = await _successors(self.controller, self.scope, self.stream, writer.segment)
        if successors is None:  # the stream itself was sealed
            self._fail_all(writer, ssc.SegmentSealedError(f"{self.scope}/{self.stream} is sealed"))
            return
        assert self._keyspace is not None
        self._keyspace = replace_sealed(self._keyspace, writer.segment, successors)
        self._routes = {}
        # A call's first blocks may have been stored before a later one found the segment
        # sealed: those events are in the sealed segment, and sending them on would store
        # them twice. Only what comes after the last acknowledged event goes on.
        acked = writer.client.acked_event_number(writer.writer_id)
        for item in _take_unpersisted(writer, acked, self._held.complete):
            if item.keys is None:
                await self._send(item)
            else:
                await self._send_split(item)

    async def _send_split(self, item: _Pending) -> None:
        """Re-route a batch item whose events have their own keys: each part goes to the
        segment now owning its keys, in order; the item completes when every part did."""
        assert self._keyspace is not None
        parts = _split_by_segment(item, self._keyspace)
        gathered = asyncio.gather(*(p.done for p in parts))
        gathered.add_done_callback(
            lambda f: self._held.complete(item, None if f.cancelled() else f.exception())
        )
        for part in parts:
            await self._send(part)

    def _fail_all(self, writer: _SegmentWriter, error: BaseException) -> None:
        writer.unsent = []
        while writer.pending:
            self._held.complete(writer.pending.popleft(), error)

    async def flush(self) -> None:
        """Wait until every event written so far is durable (or has failed). When the stream
        sets ``timestampAggregationTimeout``, then report the time now as this writer's mark."""
        attributes = traces.messaging("send", self.scope, self.stream)
        with traces.span(f"send {self.scope}/{self.stream}", "producer", **attributes):
            await self._drain()
        if self.automatic_marks and self._writers:
            await self.note_time(int(time.time() * 1000))

    async def _drain(self) -> None:
        while self._held.count:
            await asyncio.sleep(0)  # let the shipping tasks hand over what is queued
            await _send_open_blocks(self._writers)
            await self._held.wait_drained(0.5)

    @property
    def position(self) -> dict[int, int]:
        """What this writer has written, as ``{segment id: offset}``: per segment it wrote to,
        the segment's length after its last acknowledged append."""
        return {sid: w.acked_offset for sid, w in self._writers.items() if w.acked_offset}

    async def note_time(self, timestamp_ms: int) -> None:
        """Report that every event this writer wrote so far has a time before
        ``timestamp_ms`` (Pravega's ``noteTime``): the writer first waits until they are
        durable, then sends the time with its position. Watermarks are made of these."""
        if timestamp_ms < 0:
            raise ValueError(f"timestamp_ms must not be negative, not {timestamp_ms}")
        await self._drain()
        await self.controller.note_writer_mark(
            self.scope, self.stream, self.writer_id, timestamp_ms, self.position
        )

    async def flush_events(self, done: list[asyncio.Future[None]]) -> None:
        """Wait until the events of ``done`` (futures of ``write_event``) are durable; raise
        the first failure."""
        await asyncio.sleep(0)  # let the shipping tasks hand over what is queued
        await _send_open_blocks(self._writers)
        await asyncio.gather(*done)

    async def abandon(self, error: Exception) -> None:
        """Give up on every event not yet acknowledged: each fails with ``error``, nothing
        more is sent or sent again, and the connections close. An event never sent is never
        written; one sent and not yet acknowledged may have been."""
        self._abandoned = error
        for writer in self._writers.values():
            writer.sealed = True  # no more shipping, no reconnect
            self._fail_all(writer, error)
        self._writers, self._routes = {}, {}
        if self._pool is not None:
            await self._pool.close()

    async def close(self) -> None:
        await self.flush()
        if self._pool is not None:
            await self._pool.close()
