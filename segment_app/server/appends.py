"""The pipelined append path of one wire connection: append sessions, blocks, replies in order.

Responsibility: SetupAppend binds a writer id to a segment on its connection (after the token
check); AppendBlockEnd, ConditionalBlockEnd and ConditionalAppend of that writer are collected
while one received buffer is decoded and handed to ``store.append_group_nowait`` together at its
end (one durable log group and one future per container, not one per block), without awaiting,
so many blocks are in flight while reading goes on. A plain AppendBlockEnd (well formed, of a
writer set up here, passing the block checks) is read straight from its payload without being
decoded into a command, and answered with a DataAppended encoded from plain values; anything
else takes the generic path. Each block is acknowledged (DataAppended) only once it is durable
in tier-1; replies per writer are sent in the order the blocks arrived. After an append of a
writer fails, later blocks of that writer on this connection are refused with the same error
(never appended past a gap) until a new SetupAppend.

The connection (``segment_app.server.connection``) owns the socket, framing and back-pressure;
it hands this path the append frames and reads its counts of appends and bytes in flight.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import logging
import time
import uuid
from typing import Any, Protocol

from millrace.kernel import wire as wire
from millrace.kernel.claims import READ_UPDATE, AuthError
from millrace.kernel.wire.fastpath import (
    APPEND_BLOCK_END_DATA_START,
    data_appended_frame,
    split_append_block_end,
)
from segment_app.engine.api import AppendItem
from segment_app.engine.errors import (
    AppendsRefusedError,
    BadEventNumberError,
    BadOffsetError,
    ContainerOfflineError,
    InvalidArgumentError,
)
from segment_app.server.replies import reply_for_error
from segment_app.server.schema_guard import (
    UNKNOWN_SCHEMA,
    SchemaRefusedError,
    judge,
    stream_of,
)
from segment_app.server.services import ConnectionServices

__all__ = ["AppendPath", "AppendReplies"]

log = logging.getLogger(__name__)

#: The longest one hold of a client's reading (then the quota is looked at again): short
#: enough that the client's keep-alives are answered within its patience.
HOLD_MAX_SECONDS = 1.0
#: Block data at least this long is handed on as a view of the received frame, shorter data as
#: a copy (cheaper than a view to make, and not tracked by the garbage collector).
_VIEW_BYTES_MIN = 4096
#: (A pending append's writer before it is given one: never sent.)
_NO_WRITER = uuid.UUID(int=0)


@dataclasses.dataclass(slots=True)
class _PendingAppend(AppendItem):
    """A block waiting for its reply; the store fills in ``result`` or ``error``. (Its writer
    and event number are always given: the fields keep their places, typed as they are here.)"""

    writer_id: uuid.UUID = _NO_WRITER
    event_number: int = 0
    request_id: int = 0
    conditional: bool = False
    size: int = 0
    writer: _Writer | None = None
    #: Its outcome (``result`` or ``error``) is final.
    done: bool = False
    #: The events of the block (what a scope's events-per-second quota counts).
    events: int = 1
    #: When its acknowledgement may go (monotonic seconds): its scope's rate quota is paid.
    release_at: float = 0.0


@dataclasses.dataclass(slots=True)
class _Writer:
    """An append session: a writer id bound to a segment on one connection."""

    segment: str
    writer_id: uuid.UUID
    #: ``writer_id`` as its 16 wire bytes (how plain blocks find their writer, and replies
    #: name it).
    raw: bytes
    pending: collections.deque[_PendingAppend] = dataclasses.field(
        default_factory=collections.deque
    )
    last_event_number: int = wire.NO_EVENT_NUMBER
    failure: BaseException | None = None
    #: The stream whose schema policy judges its blocks (None: not guarded).
    stream: tuple[str, str] | None = None
    #: Blocks waiting, in order, for the stream's policy to be read again (one of them named a
    #: schema id the cached policy does not know).
    held: list[_PendingAppend] | None = None


class AppendReplies(Protocol):
    """What the append path needs of its connection: to send replies, to hold and resume the
    client's reading, and to know whether it is closed (``WireConnection`` is one)."""

    closed: bool
    #: The connection's tasks (cancelled when it is lost).
    tasks: set[asyncio.Task[None]]

    def send(self, cmd: Any) -> None: ...

    def send_frames(self, frames: list[bytes]) -> None: ...

    def update_reading(self) -> None: ...

    def hold(self, seconds: float) -> None: ...

    def end_hold(self) -> None: ...


class AppendPath:
    """The append sessions of one connection and their blocks in flight."""

    def __init__(self, services: ConnectionServices, connection: AppendReplies) -> None:
        self.connection = connection
        self.config = services.config
        self.store = services.store
        self.requests = services.requests
        self.writers: dict[uuid.UUID, _Writer] = {}
        #: The same writers by the 16 bytes of their id.
        self._writers_by_raw: dict[bytes, _Writer] = {}
        self.in_flight = 0
        self.bytes_in_flight = 0
        #: Appends of the buffer being decoded, handed to the store together at its end.
        self.batch: list[_PendingAppend] = []
        self._traffic_monitor = services.traffic
        self._traffic = services.traffic.record if self.config.traffic_monitor else None
        self._guard = services.schema_guard
        self._quotas = services.quotas
        #: The scopes with a quota this client appended to (a hold ends when all are paid).
        self.charged: set[str] = set()
        #: Since when this client is held for its scopes' rates (None: it is not).
        self.held_since: float | None = None

    # -- append sessions ------------------------------------------------------------------------

    async def setup_append(self, cmd: wire.SetupAppend) -> None:
        try:
            self.requests.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
            self._check_writer_room(cmd.writer_id, cmd.segment)
            await self.requests.tables.refuse_table(cmd.segment)
            last = await self.store.last_event_number(cmd.segment, cmd.writer_id)
            stream = stream_of(cmd.segment) if self._guard is not None else None
            if stream is not None:
                await self._guard.ready(stream)  # type: ignore[union-attr]
        except Exception as exc:
            reply = reply_for_error(exc, request_id=cmd.request_id, segment=cmd.segment)
            self.connection.send(reply)
            return
        writer = _Writer(cmd.segment, cmd.writer_id, cmd.writer_id.bytes, stream=stream)
        self.writers[cmd.writer_id] = writer
        self._writers_by_raw[writer.raw] = writer
        self.connection.send(wire.AppendSetup(cmd.request_id, cmd.segment, cmd.writer_id, last))

    def _check_writer_room(self, writer_id: uuid.UUID, segment: str) -> None:
        limit = self.config.writers_per_connection_max
        if writer_id not in self.writers and len(self.writers) >= limit:
            raise InvalidArgumentError(
                f"more than {limit} writers on one connection", segment=segment
            )

    def _writer(self, writer_id: uuid.UUID, request_id: int) -> _Writer | None:
        writer = self.writers.get(writer_id)
        if writer is None:
            message = f"writer {writer_id} has no SetupAppend on this connection"
            exc = AuthError(message) if self.config.auth_enabled else InvalidArgumentError(message)
            self.connection.send(reply_for_error(exc, request_id=request_id))
        return writer

    # -- blocks in --------------------------------------------------------------------------------

    def plain_block(self, payload: bytes | memoryview) -> bool:
        """Queue an AppendBlockEnd payload that is well formed, of a writer set up here and
        without a failure, and passes ``_block_problem``, as ``append_block_end`` would, but
        without decoding it into a command. False: the generic path must handle (and answer) it.
        """
        fields = split_append_block_end(payload)  # type: ignore[arg-type]
        if fields is None:
            return False
        raw, whole, end, num_events, last, request_id = fields
        writer = self._writers_by_raw.get(raw)
        size = end - APPEND_BLOCK_END_DATA_START
        if (
            writer is None
            or writer.failure is not None
            or num_events <= 0
            or last < writer.last_event_number
            or whole != size
        ):
            return False
        writer.last_event_number = last
        if size < _VIEW_BYTES_MIN:  # a copy costs less than a view, and the collector skips it
            data = payload[APPEND_BLOCK_END_DATA_START:end]
        else:
            data = memoryview(payload)[APPEND_BLOCK_END_DATA_START:end]
        pending = _PendingAppend(
            writer.segment,
            data,
            writer.writer_id,
            last,
            None,
            None,
            None,
            request_id,
            False,
            size,
            writer,
        )
        pending.events = num_events
        self._queue(writer, pending)
        return True

    def append_block_end(self, cmd: wire.AppendBlockEnd) -> None:
        writer = self._writer(cmd.writer_id, cmd.request_id)
        if writer is None:
            return
        problem = _block_problem(cmd, writer)
        if problem is not None:
            self._enqueue_failed(
                writer, cmd.writer_id, cmd.last_event_number, cmd.request_id, problem
            )
            return
        writer.last_event_number = cmd.last_event_number
        self._enqueue(writer, cmd.writer_id, cmd.data, cmd.last_event_number, cmd.request_id, None,
                      events=max(cmd.num_events, 1))  # fmt: skip

    def conditional_block_end(self, cmd: wire.ConditionalBlockEnd) -> None:
        writer = self._writer(cmd.writer_id, cmd.request_id)
        if writer is not None:
            self._conditional(writer, cmd, cmd.data)

    def conditional_append(self, cmd: wire.ConditionalAppend) -> None:
        writer = self._writer(cmd.writer_id, cmd.request_id)
        if writer is not None:
            header = wire.EVENT_HEADER.pack(wire.EVENT_TYPE, len(cmd.data))
            self._conditional(writer, cmd, header + bytes(cmd.data))

    def _conditional(self, writer: _Writer, cmd: Any, data: bytes | memoryview) -> None:
        if cmd.expected_offset < 0:
            problem = InvalidArgumentError(f"negative expected offset {cmd.expected_offset}")
            self._enqueue_failed(writer, cmd.writer_id, cmd.event_number, cmd.request_id, problem)
            return
        self._enqueue(
            writer, cmd.writer_id, data, cmd.event_number, cmd.request_id, cmd.expected_offset
        )

    def _enqueue(
        self,
        writer: _Writer,
        writer_id: uuid.UUID,
        data: bytes | memoryview,
        event_number: int,
        request_id: int,
        expected_offset: int | None,
        events: int = 1,
    ) -> None:
        if writer.failure is not None:
            self._enqueue_failed(writer, writer_id, event_number, request_id, writer.failure)
            return
        pending = _PendingAppend(
            writer.segment,
            data,
            writer_id,
            event_number,
            expected_offset,
            request_id=request_id,
            conditional=expected_offset is not None,
            size=len(data),
            writer=writer,
            events=events,
        )
        self._queue(writer, pending)

    def _queue(self, writer: _Writer, pending: _PendingAppend) -> None:
        """Count an append in flight and put it in the batch handed to the store, once its
        stream's schema policy passes it."""
        writer.pending.append(pending)
        self.in_flight += 1
        self.bytes_in_flight += pending.size
        if writer.stream is not None:
            if writer.held is not None:  # behind a block waiting for the policy
                writer.held.append(pending)
                return
            policy = self._guard.policy(writer.stream)  # type: ignore[union-attr]
            refusal = UNKNOWN_SCHEMA if policy is None else judge(policy, pending.data)
            if refusal is UNKNOWN_SCHEMA:  # (or the policy is too old): read it again first
                writer.held = [pending]
                task = asyncio.ensure_future(self._judge_held(writer))
                self.connection.tasks.add(task)
                task.add_done_callback(self.connection.tasks.discard)
                return
            if refusal is not None:
                assert policy is not None
                self._refuse(writer, pending, refusal.error(writer.segment, policy,
                                                            pending.event_number))  # fmt: skip
                return
        self.batch.append(pending)

    async def _judge_held(self, writer: _Writer) -> None:
        """Read the stream's policy again, then judge the held blocks with it, in order (a
        schema id still unknown is refused); those that pass go to the store. (A reload that
        fails gives the cached policy, however old.)"""
        assert writer.stream is not None and self._guard is not None
        failure: BaseException | None = None
        try:
            policy = await self._guard.reload(writer.stream)
        except ContainerOfflineError as exc:
            policy, failure = None, exc
        while writer.held:
            held, writer.held = writer.held, []
            for pending in held:
                if policy is None or writer.failure is not None:
                    refused = writer.failure or failure
                    assert refused is not None
                    self._refuse(writer, pending, refused)
                    continue
                refusal = judge(policy, pending.data, final=True)
                if refusal is None:
                    self.batch.append(pending)
                else:
                    error = refusal.error(writer.segment, policy, pending.event_number)
                    self._refuse(writer, pending, error)
        writer.held = None
        if self.batch and not self.connection.closed:
            self.submit_batch()

    def _refuse(self, writer: _Writer, pending: _PendingAppend, exc: BaseException) -> None:
        """Answer a counted append with ``exc``; unless it is a schema refusal, the writer's
        later blocks get it too."""
        pending.error = exc
        pending.done = True
        if _is_gap_failure(pending):
            writer.failure = writer.failure or exc
        self._send_replies(writer)

    def _enqueue_failed(
        self,
        writer: _Writer,
        writer_id: uuid.UUID,
        event_number: int,
        request_id: int,
        exc: BaseException,
    ) -> None:
        pending = _PendingAppend(
            writer.segment, b"", writer_id, event_number, request_id=request_id, writer=writer
        )
        pending.error = exc
        pending.done = True
        if _is_gap_failure(pending):
            writer.failure = exc
        writer.pending.append(pending)
        self.in_flight += 1
        self._send_replies(writer)

    # -- to the store and back ----------------------------------------------------------------

    def submit_batch(self) -> None:
        """Hand the appends collected from one received buffer to the store, together."""
        batch, self.batch = self.batch, []
        started = time.monotonic()
        if self._quotas is not None and self._quotas.allowances:
            batch = self._refuse_over_stored_quota(batch, started)
            self._charge(batch)
        try:
            parts = self.store.append_group_nowait(batch)
        except Exception as exc:
            log.exception("append_group_nowait failed")
            self._part_done(batch, started, _failed_future(exc))
        else:
            for part, future in parts:
                # (the parts hold the items given: pending appends)
                done = functools.partial(self._part_done, part, started)  # type: ignore[arg-type]
                future.add_done_callback(done)
        self.connection.update_reading()

    def _refuse_over_stored_quota(
        self, batch: list[_PendingAppend], started: float
    ) -> list[_PendingAppend]:
        """The appends of ``batch`` whose scope may take them; the others fail at once,
        refused (retriable: the writer sends them again until its delivery timeout)."""
        quotas = self._quotas
        assert quotas is not None
        kept = []
        for pending in batch:
            reason = quotas.refusal(pending.segment)
            if reason is None:
                kept.append(pending)
            else:
                self._part_done([pending], started, _failed_future(AppendsRefusedError(reason)))
        return kept

    def _part_done(
        self, part: list[_PendingAppend], started: float, future: asyncio.Future[object]
    ) -> None:
        failure = _exception_of(future)
        if failure is None and not self.connection.closed:
            if self._traffic is not None:
                self._traffic_monitor.record_latency(time.monotonic() - started)
                self._count_traffic(part)
            release = max(pending.release_at for pending in part)
            if release > time.monotonic():  # its scope is over its rate: the replies wait
                asyncio.get_running_loop().call_later(
                    release - time.monotonic(), self._release, part
                )
                return
            self._replies_of_part(part)
            self.connection.update_reading()
            return
        writers: dict[int, _Writer] = {}
        for pending in part:
            if failure is not None:
                pending.error = failure
            elif pending.error is None and pending.result is None:  # pragma: no cover
                pending.error = ContainerOfflineError("append has no outcome")
            pending.done = True
            writer = pending.writer
            assert writer is not None
            writers[id(writer)] = writer
        for writer in writers.values():
            self._send_replies(writer)
        self.connection.update_reading()

    def _charge(self, batch: list[_PendingAppend]) -> None:
        """Charge the appends just received to their scopes' rate quotas; while a scope is
        over its share, read nothing more from this client (Kafka's throttle: its writers then
        wait, at the rate, on their own windows)."""
        quotas = self._quotas
        assert quotas is not None
        delay, now = 0.0, time.monotonic()
        for pending in batch:
            scope = quotas.scope_charged(pending.segment, pending.size, pending.events)
            if scope is not None:
                self.charged.add(scope)
                wait = quotas.wait(scope)
                if wait > 0:
                    pending.release_at = now + wait
                    delay = max(delay, wait)
        if delay > 0:
            self._hold(delay)

    def _hold(self, delay: float) -> None:
        if self.held_since is not None:
            return  # (its recheck holds it again)
        self.held_since = time.monotonic()
        self._hold_again(delay)

    def _hold_again(self, delay: float) -> None:
        seconds = min(delay, HOLD_MAX_SECONDS)
        self.connection.hold(seconds)
        asyncio.get_running_loop().call_later(seconds, self._recheck)

    def _recheck(self) -> None:
        """The end of a hold: hold again while a scope this client charged is still over,
        with a KeepAlive sent (what it sent meanwhile is not read: it hears the node is there
        and keeps the connection, rather than giving it up after its silence and sending its
        appends again on another)."""
        if self.connection.closed or self._quotas is None:
            return
        delay = max((self._quotas.wait(scope) for scope in self.charged), default=0.0)
        if delay > 0:
            self.connection.send(wire.KeepAlive())
            self._hold_again(delay)
            return
        if self.held_since is not None:
            self._quotas.held(self.charged, time.monotonic() - self.held_since)
            self.held_since = None
        self.connection.end_hold()

    def _release(self, part: list[_PendingAppend]) -> None:
        """The replies of a part held for its scope's rate, once its time has come."""
        if not self.connection.closed:
            self._replies_of_part(part)
            self.connection.update_reading()

    def _count_traffic(self, part: list[_PendingAppend]) -> None:
        """Tell the traffic monitor what the store acknowledged (events and bytes a block)."""
        record = self._traffic
        assert record is not None
        for pending in part:
            result = pending.result
            if pending.error is None and result is not None:
                # a writer's first append has no previous event (a negative sentinel)
                events = pending.event_number - max(result.previous_event_number, 0)
                record(pending.segment, events if events > 0 else 1, pending.size)

    def _replies_of_part(self, part: list[_PendingAppend]) -> None:
        """``_part_done`` of a part that succeeded: an append that came out well and is its
        writer's oldest is answered at once; any other goes the ``_send_replies`` way."""
        frames: list[bytes] = []
        for pending in part:
            writer = pending.writer
            assert writer is not None
            result = pending.result
            waiting = writer.pending
            if pending.error is None and result is not None and waiting[0] is pending:
                waiting.popleft()
                self.in_flight -= 1
                self.bytes_in_flight -= pending.size
                frames.append(
                    data_appended_frame(
                        writer.raw,
                        pending.event_number,
                        result.previous_event_number,
                        pending.request_id,
                        result.length,
                    )
                )
                if waiting and waiting[0].done:  # refused after it, answered in turn
                    self.connection.send_frames(frames)
                    frames = []
                    self._send_replies(writer)
                continue
            if pending.error is None and result is None:  # pragma: no cover
                pending.error = ContainerOfflineError("append has no outcome")
            pending.done = True
            self.connection.send_frames(frames)
            frames = []
            self._send_replies(writer)
        if frames:
            self.connection.send_frames(frames)

    def _send_replies(self, writer: _Writer) -> None:
        """Reply to the writer's blocks that are answered, in the order they arrived."""
        pending = writer.pending
        while pending and pending[0].done:
            done = pending.popleft()
            self.in_flight -= 1
            self.bytes_in_flight -= done.size
            if _is_gap_failure(done):
                writer.failure = writer.failure or done.error
            self.connection.send(_append_reply(writer, done))


def _failed_future(exc: BaseException) -> asyncio.Future[object]:
    future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future


def _exception_of(future: asyncio.Future[object]) -> BaseException | None:
    if future.cancelled():
        return ContainerOfflineError("append cancelled: the segment store is stopping")
    return future.exception()


def _is_gap_failure(pending: _PendingAppend) -> bool:
    """A failed append after which later ones of the writer must not be applied (the writer
    will send it again: not one refused for good by the schema enforcement)."""
    exc = pending.error
    if exc is None or isinstance(exc, SchemaRefusedError):
        return False
    return not (pending.conditional and isinstance(exc, BadOffsetError))


def _append_reply(writer: _Writer, pending: _PendingAppend) -> object:
    exc = pending.error
    if exc is None:
        result = pending.result
        assert result is not None
        return wire.DataAppended(
            pending.writer_id,
            pending.event_number,
            result.previous_event_number,
            pending.request_id,
            result.length,
        )
    if pending.conditional and isinstance(exc, BadOffsetError):
        return wire.ConditionalCheckFailed(
            pending.writer_id, pending.event_number, pending.request_id
        )
    return reply_for_error(
        exc,
        request_id=pending.request_id,
        segment=writer.segment,
        writer_id=pending.writer_id,
        event_number=pending.event_number,
    )


def _block_problem(cmd: wire.AppendBlockEnd, writer: _Writer) -> Exception | None:
    if cmd.num_events <= 0:
        return BadEventNumberError(f"block has {cmd.num_events} events", segment=writer.segment)
    if cmd.last_event_number < writer.last_event_number:
        return BadEventNumberError(
            f"event number {cmd.last_event_number} goes back from {writer.last_event_number}",
            segment=writer.segment,
        )
    if cmd.size_of_whole_events != len(cmd.data):
        return InvalidArgumentError(
            f"sizeOfWholeEvents {cmd.size_of_whole_events} but {len(cmd.data)} data bytes "
            "(partial events and AppendBlock are not supported)",
            segment=writer.segment,
        )
    return None
