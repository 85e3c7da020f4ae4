"""The append side of a segment store client: writers' sessions, batching, flow and acks.

Responsibility: ``AppendSessions``, a part of the client, keeps each writer's append session on
the connection it listens to (``Connection.listen``); its ``setup_append`` is a request/reply
call of the client's ``SegmentCalls``.
``setup_append(segment, writer_id)`` returns the writer's last persisted event number;
``append_block(writer_id, events)`` numbers the events, wraps each in the 8-byte event header
(unless ``raw``), batches them into AppendBlockEnd blocks (a block is sent when full, after
``linger_ms``, or on ``flush``), keeps up to ``blocks_in_flight_max`` blocks in flight and
returns a future completed by the DataAppended acknowledgement; ``conditional_append`` sends one
ConditionalBlockEnd (the byte-stream write). It holds blocks back while the connection is
congested; when a block is due is ``send_timing``'s (linger, next turn, busy), and the order
blocks complete in, which ``append_many`` (``millrace.client.transport.append_many``) completes
its calls by, ``completion``'s. The methods ``append_many`` adds events through (``session``,
``open_block``, ``fill_open``, ``fill_all``, ``limit_open``) are public for it. A lost
connection fails every pending append with ``AppendsLostError`` listing the unacked events.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from millrace.client.errors import (
    InvalidArgumentError,
    SchemaRefusedError,
    SegmentStoreError,
    error_from_reply,
)
from millrace.client.transport.append_blocks import (
    BLOCK_LAST,
    BLOCK_RID,
    EVENT_HEADER_BYTES,
    AppendAck,
    AppendLimits,
    Block,
    Session,
    WriterHandle,
    block_data,
    kept_as_is,
    uniform_cap,
)
from millrace.client.transport.calls import SegmentCalls
from millrace.client.transport.completion import CompletionOrder
from millrace.client.transport.connection import SEND_BUFFER_BYTES
from millrace.client.transport.send_timing import SendTiming
from millrace.kernel import wire

__all__ = ["OPEN_BYTES_MAX", "AppendSessions"]

#: transport is congested.
OPEN_BYTES_MAX = 64 * 1024 * 1024
_BYTES_LIKE = (bytes, bytearray, memoryview)


class AppendSessions:
    """Append sessions on one connection (see the module's docstring)."""

    def __init__(self, calls: SegmentCalls, *, limits: AppendLimits | None = None) -> None:
        self.limits = limits or AppendLimits()
        #: The client's request/reply calls (``setup_append`` is one).
        self._requests = calls
        self.connection = calls.connection
        self.connection.listen(self)
        #: The connection's request ids (blocks take theirs from the same count).
        self._request_ids = self.connection.request_ids
        #: Append sessions by ``writer_id.int`` (an int hashes in C; a UUID in Python).
        self.sessions: dict[int, Session] = {}
        #: Request id of a block in flight -> its writer's ``writer_id.int``.
        self._blocks: dict[int, int] = {}
        #: Append blocks sent on this connection (diagnostics: events per block).
        self.blocks_sent = 0
        #: Writers with a block due but held open while congested, oldest first, by
        #: ``writer_id.int``; sent in that order when the transport drains.
        self._held: dict[int, Session] = {}
        #: Bytes in open blocks over all writers.
        self.open_bytes = 0
        #: The completion order of blocks (and ``append_many`` calls: ``append_many``).
        self.completion = CompletionOrder()
        #: When each writer's open block is sent (linger, next turn, busy).
        self.timing = SendTiming(self.limits, self.completion, self._pump)
        #: Clear while appends must wait: congested with OPEN_BYTES_MAX in open blocks.
        self.writable = asyncio.Event()
        self.writable.set()

    # -- what the connection tells ----------------------------------------------------------------

    def replies_read(self) -> None:
        if self.completion.resolved:
            self.completion.advance()

    def drained(self) -> None:
        if self._held or not self.writable.is_set():
            self._release_held()  # (which lets waiting appends go on)

    def lost(self) -> None:
        self.writable.set()
        for session in list(self.sessions.values()):
            self._fail_session(session, None)
        self.completion.advance()

    def block_reply(self, request_id: int, reply: Any) -> bool:
        if request_id not in self._blocks:
            return False
        self._on_block_error(request_id, reply)
        return True

    # -- flow -------------------------------------------------------------------------------------

    def _release_held(self) -> None:
        """The transport took what it had: send held blocks, oldest first, up to one send
        buffer's worth per loop turn (the rest go after ``_flush_out`` wrote these)."""
        budget = SEND_BUFFER_BYTES
        held = self._held
        for key in list(held):  # (a snapshot: popping the first again and again is quadratic)
            if budget <= 0 or self.connection.congested or self.connection.lost is not None:
                break
            session = held.pop(key)
            budget -= session.block_bytes()
            self._pump(session)
        if not self.connection.congested or self.open_bytes <= OPEN_BYTES_MAX:
            self.writable.set()

    async def setup_append(
        self, segment: str, writer_id: uuid.UUID, *, token: str | None = None
    ) -> int:
        """Start appending to ``segment`` as ``writer_id``; returns its last persisted event
        number (NO_EVENT_NUMBER for a new writer). Numbering continues after it."""

        def make(rid: int) -> Any:
            return wire.SetupAppend(rid, writer_id, segment, self._requests.token(token))

        old = self.sessions.get(writer_id.int)
        if old is not None and (old.call_lasts or old.in_flight or old.open_events):
            raise InvalidArgumentError(f"writer {writer_id} still has appends pending")
        last = (await self._requests.call(make, wire.AppendSetup)).last_event_number
        session = Session(
            owner=self,
            segment=segment,
            writer_id=writer_id,
            open_first=max(last, 0) + 1,
            acked=last,
        )
        old = self.sessions.get(writer_id.int)
        if old is not None and old.failure is None:  # its handles are stale from now on
            old.failure = InvalidArgumentError(
                f"writer handle of {writer_id} is stale: setup_append was called again"
            )
        self.sessions[writer_id.int] = session
        return last

    def acked_event_number(self, writer_id: uuid.UUID) -> int:
        """The highest event number of ``writer_id`` the segment store acknowledged on this
        connection (its last persisted one at ``setup_append`` if none since), also after the
        session failed: a writer whose segment was sealed in the middle of a call re-routes
        only the events after it (the others are stored in the sealed segment)."""
        session = self.sessions.get(writer_id.int)
        if session is None:
            raise InvalidArgumentError(f"no setup_append for writer {writer_id}")
        return session.acked

    def writer_handle(self, writer_id: uuid.UUID) -> WriterHandle:
        """The writer's handle on this connection (after ``setup_append``): taken wherever a
        writer id is, it saves looking the writer up by id for every event."""
        return self.session(writer_id)

    async def append_block(
        self,
        writer_id: uuid.UUID | WriterHandle,
        events: bytes | Sequence[bytes | bytearray | memoryview],
        *,
        raw: bool = False,
    ) -> asyncio.Future[AppendAck]:
        """Queue events (one ``bytes`` or a sequence) for the writer; returns a future completed
        when all of them are acknowledged. Waits while ``blocks_in_flight_max`` blocks are out.
        ``raw``: the bytes are appended as they are, without event headers."""
        if not self.writable.is_set():
            await self.writable.wait()
        session = self.session(writer_id)
        batch: Sequence[bytes | bytearray | memoryview]
        batch = [events] if isinstance(events, _BYTES_LIKE) else events
        await self.fill_all(session, batch, raw)
        self.timing.window.events += len(batch)
        future: asyncio.Future[AppendAck] = asyncio.get_running_loop().create_future()
        last = session.next_event_number - 1
        if batch or session.call_lasts:
            session.add_call(last, future)
            self.timing.schedule(session)
        else:
            future.set_result(AppendAck(last, -1, -1))
        return future

    async def fill_all(
        self,
        session: Session,
        events: Sequence[bytes | bytearray | memoryview],
        raw: bool = False,
    ) -> None:
        """Put all ``events`` in the session's open blocks, sending full ones on the way."""
        before = session.block_bytes()
        try:
            added = self.fill_open(session, events, raw, 0)
            while added < len(events):  # the open block is full: send it, then go on
                self.open_bytes += session.block_bytes() - before
                await self._drain_open(session)
                before = session.block_bytes()
                added = self.fill_open(session, events, raw, added)
        finally:
            self.open_bytes += session.block_bytes() - before
            self.limit_open()

    def limit_open(self) -> None:
        """While congested with OPEN_BYTES_MAX in open blocks, the next append waits for the
        transport to drain (``_release_held`` lets it go on)."""
        if self.connection.congested and self.open_bytes > OPEN_BYTES_MAX:
            self.writable.clear()

    async def append_event(
        self, writer_id: uuid.UUID | WriterHandle, event: bytes
    ) -> asyncio.Future[AppendAck]:
        """``append_block`` of a single event."""
        return await self.append_block(writer_id, [event])

    async def flush(self, writer_id: uuid.UUID | WriterHandle | None = None) -> None:
        """Send every open block now and wait until all appends are acknowledged (of the
        writer, if one is given; raises its failure, or that of a call waited for)."""
        if writer_id is not None:
            sessions = [self.session(writer_id)]
        else:
            sessions = [s for s in self.sessions.values() if s.failure is None]
        waits: set[asyncio.Future[Any]] = set()
        for session in sessions:
            await self._drain_open(session)
            waits.update(session.call_waiters)
        if writer_id is None:
            waits.update(self.completion.pending_calls())
        if waits:
            await asyncio.gather(*waits)
        for session in sessions:  # (its events handed by append_many)
            while session.in_flight and session.failure is None:
                await session.wait_room()
            if writer_id is not None and session.failure is not None:
                raise session.failure

    async def conditional_append(
        self,
        writer_id: uuid.UUID | WriterHandle,
        data: bytes,
        expected_offset: int,
        *,
        raw: bool = True,
    ) -> AppendAck:
        """Append ``data`` only if the segment length is ``expected_offset`` (ConditionalBlockEnd);
        raises BadOffsetError otherwise. ``raw=False`` wraps it in an event header."""
        session = self.session(writer_id)
        await self._drain_open(session)
        payload = bytes(data) if raw else wire.EVENT_HEADER.pack(0, len(data)) + bytes(data)
        number = session.open_first  # (no block open: drained)
        session.open_first += 1
        request_id = next(self._request_ids)
        call = self.completion.open(request_id)
        future: asyncio.Future[AppendAck] = asyncio.get_running_loop().create_future()
        session.add_call(number, future)
        self._send_block(
            session,
            (request_id, number, number, (bytes(data),), call),
            wire.ConditionalBlockEnd(
                session.writer_id, number, expected_offset, payload, request_id
            ),
        )
        return await future

    def session(self, writer: uuid.UUID | WriterHandle) -> Session:
        """The writer's session, given its id or its handle; raises why it takes no appends."""
        if type(writer) is Session:
            if writer.owner is not self:
                raise InvalidArgumentError(
                    f"writer handle of {writer.writer_id} belongs to another connection"
                )
            session: Session | None = writer
        elif isinstance(writer, uuid.UUID):
            session = self.sessions.get(writer.int)
        else:
            raise InvalidArgumentError(f"not a writer id or handle: {writer!r}")
        if session is None:
            raise InvalidArgumentError(f"no setup_append for writer {writer}")
        if session.failure is not None:
            raise session.failure
        if self.connection.lost is not None:
            raise self.connection.lost
        return session

    def fill_open(
        self,
        session: Session,
        events: Sequence[bytes | bytearray | memoryview],
        raw: bool,
        start: int,
    ) -> int:
        """Put ``events[start:]`` in the open block until one does not fit (the block is then
        full, or holds the other kind of ``raw``, and must be sent first); returns the index of
        the first event not added. The hot loop of the client: keep it lean."""
        limits = self.limits
        overhead = 0 if raw else EVENT_HEADER_BYTES
        opened = session.open_events
        for index in range(start, len(events)):
            event: bytes | memoryview = events[index]  # type: ignore[assignment] # (see below)
            if type(event) is not bytes and not (raw and kept_as_is(event)):
                event = bytes(event)  # (the caller may change it after we return)
            n = len(event)
            if n > limits.event_bytes_max:
                raise InvalidArgumentError(f"event of {n} bytes exceeds {limits.event_bytes_max}")
            if not opened:
                self.open_block(session, raw, n)
            elif n == session.open_size and not raw:  # (of one size: open_cap says if it fits)
                if len(opened) >= session.open_cap:
                    return index
            elif (
                session.open_raw is not raw
                or session.block_bytes() + n + overhead > limits.block_bytes_max
                or len(opened) >= limits.block_events_max
            ):
                return index
            else:
                if session.open_size >= 0:  # of mixed sizes from now on: bytes counted
                    session.open_bytes = session.block_bytes()
                    session.open_size, session.open_cap = -1, limits.block_events_max
                session.open_bytes += n + overhead
            opened.append(event)
        return len(events)

    def open_block(self, session: Session, raw: bool, size: int) -> None:
        """The session's block opens for its first event, of ``size`` bytes: it takes its
        request id and its place in the completion order, and counts by events of that size
        (``open_cap``) or, if ``raw``, by bytes."""
        rid = next(self._request_ids)
        session.open_rid = rid
        session.open_call = self.completion.open(rid)
        session.open_raw = raw
        if raw:
            session.open_size, session.open_bytes = -1, size
            session.open_cap = self.limits.block_events_max
        else:
            session.open_size, session.open_cap = size, uniform_cap(self.limits, size)

    async def _drain_open(self, session: Session) -> None:
        """Send the open block now, waiting for room in flight when needed."""
        session.send_due = True
        while session.open_events:
            self._pump(session, hold_small=False)
            if session.open_events:
                await session.wait_room()
            if session.failure is not None:
                raise session.failure

    def _pump(self, session: Session, *, hold_small: bool = True) -> None:
        """Send the open block if it is due and there is room in flight. A block that is not
        full waits (``hold_small``) while the transport is congested (in ``_held``, until it
        drains), and a small one while its writer has a block in flight."""
        if session.failure is not None or self.connection.lost is not None:
            return
        if not (session.open_events and session.send_due):
            return
        in_flight = len(session.in_flight)
        limits = self.limits
        if in_flight >= limits.blocks_in_flight_max:
            return
        if hold_small and not session.open_full(limits):
            if session.busy_until and self.timing.window.busy:
                return  # (its linger sends it)
            if self.connection.congested:
                self._held.setdefault(session.writer_id.int, session)
                return
            if in_flight and session.block_bytes() < limits.small_block_bytes:
                return
        first = session.open_first
        events = tuple(session.open_events)
        data = block_data(events, session.open_size, session.open_raw)
        session.open_events.clear()
        session.open_first = first + len(events)
        self.open_bytes -= len(data)  # (= block_bytes(): headers, unless raw)
        session.open_bytes = 0
        session.open_size = -1
        session.send_due = False
        session.next_turn = False
        session.busy_until = 0.0
        if session.linger is not None:
            session.linger.cancel()
            session.linger = None
        request_id = session.open_rid
        last = first + len(events) - 1
        cmd = wire.AppendBlockEnd(session.writer_id, len(data), data, len(events), last, request_id)
        self._send_block(session, (request_id, first, last, events, session.open_call), cmd)

    def _send_block(self, session: Session, block: Block, cmd: Any) -> None:
        self.blocks_sent += 1
        session.in_flight.append(block)
        self._blocks[block[BLOCK_RID]] = session.writer_id.int
        self.connection.send(cmd)

    def data_appended(self, writer: int, number: int, previous: int, offset: int) -> None:
        """An ack for the writer whose ``writer_id.int`` is ``writer``."""
        session = self.sessions.get(writer)
        if session is None:
            return
        if number > session.acked:
            session.acked = number
        in_flight, blocks, resolved = session.in_flight, self._blocks, self.completion.resolved
        while in_flight and in_flight[0][BLOCK_LAST] <= number:
            rid = in_flight.popleft()[BLOCK_RID]
            blocks.pop(rid, None)
            resolved.add(rid)  # (``replies_read`` advances the order)
        if session.call_lasts:
            session.ack_calls(number, previous, offset)
        session.wake()
        self._pump(session)

    def _on_block_error(self, request_id: int, reply: Any) -> None:
        session = self.sessions.get(self._blocks.pop(request_id))
        if session is None:
            return
        error = error_from_reply(reply)
        if isinstance(reply, wire.ConditionalCheckFailed) or isinstance(error, SchemaRefusedError):
            self._fail_block(session, request_id, error)
        else:
            self._fail_session(session, error)
            self.completion.advance()

    def _fail_block(self, session: Session, request_id: int, error: Exception) -> None:
        """Fail one block (its condition did not hold, or its stream's schemas refused it);
        the session goes on."""
        block = next((b for b in session.in_flight if b[BLOCK_RID] == request_id), None)
        if block is None:
            return
        session.in_flight.remove(block)
        self.completion.resolved.add(request_id)
        self.completion.advance()
        session.fail_calls(error, block[BLOCK_LAST])
        session.wake()
        self._pump(session)  # a block held for this one's answer goes now

    def _fail_session(self, session: Session, error: SegmentStoreError | None) -> None:
        """Fail every pending append of the session (``None``: the connection was lost)."""
        if error is None:
            error = session.lost_error(self.connection.lost)
        session.failure = session.failure or error
        self.completion.writer_failed(session)
        resolved = self.completion.resolved
        for block in session.in_flight:
            self._blocks.pop(block[BLOCK_RID], None)
            resolved.add(block[BLOCK_RID])
        session.in_flight.clear()
        session.fail_calls(error)
        self.open_bytes -= session.block_bytes()
        self._held.pop(session.writer_id.int, None)
        if session.open_events:
            resolved.add(session.open_rid)
        session.open_first += len(session.open_events)
        session.open_events.clear()
        session.open_bytes = 0
        session.open_size = -1
        session.wake()
