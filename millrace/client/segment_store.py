"""Client of the segment store wire protocol: requests, pipelined appends, and a sync wrapper.

Responsibility: one TCP connection to a segment store (Pravega's wire protocol v17, see
``docs/components/wire-protocol.md``). ``SegmentStoreClient`` connects and says Hello, then:

* request/response calls (create, info, read, seal, truncate, delete, merge, attributes), any
  number outstanding at once, matched to their replies by request id;
* append sessions: ``setup_append(segment, writer_id)`` returns the writer's last persisted event
  number; ``append_block(writer_id, events)`` numbers the events, wraps each in the 8-byte event
  header (unless ``raw``), batches them into AppendBlockEnd blocks (a block is sent when full,
  after ``linger_ms``, or on ``flush``), keeps up to ``blocks_in_flight_max`` blocks in flight and
  returns a future completed by the DataAppended acknowledgement;
* ``conditional_append`` (ConditionalBlockEnd, the byte-stream write).

Error replies become the exceptions below (named after the engine's errors they mirror). A lost
connection fails every pending call; appends fail with ``AppendsLostError`` listing the unacked
event numbers and payloads, so a caller can reconnect, ``setup_append`` again and resend the
events numbered above the returned last event number (the server drops duplicates).

``millrace.client.sync.SyncSegmentStoreClient`` runs it on a private event loop in a thread;
its errors are in ``millrace.client.errors`` (and importable from here).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import itertools
import logging
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, Final, TypeVar

from millrace import wire as wire
from millrace.client.errors import (
    AppendsLostError,
    AuthTokenCheckFailedError,
    BadEventNumberError,
    BadOffsetError,
    ConnectionLostError,
    ContainerOfflineError,
    InvalidArgumentError,
    OperationUnsupportedError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentStoreError,
    SegmentTruncatedError,
    ServerError,
    error_from_reply,
)

__all__ = [
    "NO_EVENT_NUMBER",
    "NULL_ATTRIBUTE_VALUE",
    "AppendAck",
    "AppendLimits",
    "AppendsLostError",
    "AuthTokenCheckFailedError",
    "BadEventNumberError",
    "BadOffsetError",
    "ConnectionLostError",
    "ContainerOfflineError",
    "InvalidArgumentError",
    "OperationUnsupportedError",
    "ReadResult",
    "SegmentExistsError",
    "SegmentInfo",
    "SegmentNotFoundError",
    "SegmentSealedError",
    "SegmentStoreClient",
    "SegmentStoreError",
    "SegmentTruncatedError",
    "ServerError",
    "WriterHandle",
    "error_from_reply",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

NO_EVENT_NUMBER = wire.NO_EVENT_NUMBER
WIRE = wire.WIRE_VERSION
#: Attribute value meaning "no value" (Java Long.MIN_VALUE).
NULL_ATTRIBUTE_VALUE = -(2**63)
_EVENT_HEADER = wire.EVENT_HEADER
_EVENT_HEADER_BYTES = _EVENT_HEADER.size
#: DataAppended's payload as this version sends it (writer id, event number, previous event
#: number, request id, segment write offset), decoded without the generic codec.
_DATA_APPENDED = struct.Struct(">16sqqqq")
_DATA_APPENDED_TYPE = wire.DataAppended.TYPE
_BYTES_LIKE = (bytes, bytearray, memoryview)
#: Bytes queued in the transport before it is congested (the socket takes no more: the
#: server reads slower than we append): blocks then wait in their writers' open blocks, which
#: grow (fewer, larger blocks for the server), and sent blocks in ``_out``, instead of this
#: buffer. (Kept small: the transport copies what the socket does not take into a buffer
#: that grows and shrinks by as much, and at megabytes each growth is fresh pages for the
#: kernel to fault in and zero, which cost the producer a fifth of its time.)
SEND_BUFFER_BYTES = 1024 * 1024
#: Bytes handed to the transport in one write (it joins them into one buffer: see above).
WRITE_CHUNK_BYTES = 256 * 1024
#: Bytes in open (unsent) blocks, over all writers, beyond which appends wait while the
#: transport is congested.
OPEN_BYTES_MAX = 64 * 1024 * 1024
#: How often a connection judges whether it is busy (``AppendLimits.busy_blocks``).
BUSY_WINDOW_S = 0.1
#: How often a busy connection sends the blocks whose linger ended.
BUSY_SWEEP_S = 0.02
#: Java's largest read reply; asking for more gets at most this much.
READ_BYTES_DEFAULT = 2 * 1024 * 1024


# --------------------------------------------------------------------------------------------
# results and limits


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentInfo:
    segment: str
    exists: bool
    sealed: bool
    deleted: bool
    last_modified_ms: int
    write_offset: int
    start_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class ReadResult:
    offset: int
    data: bytes
    at_tail: bool
    end_of_segment: bool


@dataclasses.dataclass(frozen=True, slots=True)
class AppendAck:
    """The acknowledgement of an append call: its last event number and the segment length."""

    event_number: int
    previous_event_number: int
    segment_write_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class AppendLimits:
    """Client-side batching of appends."""

    #: A block is sent once it holds this many bytes (a larger single event gets its own block).
    block_bytes_max: int = 1024 * 1024
    #: ... or this many events.
    block_events_max: int = 10_000
    #: Blocks sent and not yet acknowledged, per writer; further appends wait.
    blocks_in_flight_max: int = 16
    #: How long a non-full block waits for more events before it is sent (0 = next loop turn).
    linger_ms: float = 0.0
    #: A block smaller than this is held while its writer has a block in flight, until an ack
    #: comes (Nagle's rule; Pravega's writer likewise sizes blocks by its appends outstanding).
    #: Many writers on one connection, each with a trickle of events, then send blocks of what
    #: arrived in one round trip instead of one block per event. 0 = never hold.
    small_block_bytes: int = 1024
    #: Largest event accepted (Pravega's limit).
    event_bytes_max: int = 8 * 1024 * 1024
    #: A busy connection: at least ``busy_blocks`` blocks open or in flight (that many writers
    #: at work) and ``busy_events_per_s`` events handed to it per second. Its non-full blocks wait
    #: ``busy_linger_ms`` for more events: with thousands of writers each one's share of the
    #: rate is small, and blocks of what arrives in one round trip (a few events) would cost
    #: both ends more per block than per event. 0 ms: never.
    busy_blocks: int = 1000
    busy_events_per_s: int = 100_000
    busy_linger_ms: float = 500.0


# --------------------------------------------------------------------------------------------
# append sessions


#: A block in flight: (request id, number of its first event, of its last, its events, the
#: first ``append_many`` call that can have events in it). A plain tuple of ints and a tuple of
#: bytes: the garbage collector stops tracking such tuples, so thousands of blocks in flight
#: cost its full passes nothing (a class instance would).
_Block = tuple[int, int, int, tuple[bytes, ...], int]
#: The fields of a ``_Block``, by name (request id, first and last event number, events, call).
_RID: Final = 0
_FIRST: Final = 1
_LAST: Final = 2
_EVENTS: Final = 3
_CALL: Final = 4


@dataclasses.dataclass(slots=True, kw_only=True)
class _Session:
    """One writer's append state on this connection. (The fields ``append_many`` touches for
    every pair come first, so that they share the object's first cache line: with thousands
    of writers each pair is a writer not in cache.)"""

    failure: SegmentStoreError | None = None
    #: The client it belongs to (a handle given to another connection is refused).
    client: SegmentStoreClient
    #: Events of the block being filled, numbered from ``open_first``. (Emptied, not replaced,
    #: when the block is sent: no new object per block.) Their event headers are made when it
    #: is sent (see ``_block_data``) ...
    open_events: list[bytes] = dataclasses.field(default_factory=list)
    #: ... and while they are all of one size, ``open_size`` is that size, and the block takes
    #: more of that size while it holds fewer than ``open_cap`` events (the events and bytes
    #: limits in one number). So adding such an event touches neither a byte count nor an
    #: event number: with thousands of writers each such field is a miss of the CPU's caches,
    #: and each new int an allocation. -1: no block open, or its events are raw or of mixed
    #: sizes; ``open_bytes`` then counts its bytes (see ``block_bytes``).
    open_size: int = -1
    open_cap: int = 0
    #: The number of the open block's first event (of the next event when none is open).
    open_first: int
    #: The bytes the block will carry while ``open_size`` is -1: event headers counted, unless
    #: its events are ``open_raw`` (a block holds raw bytes or events, not both).
    open_bytes: int = 0
    open_raw: bool = False
    #: The request id the open block will be sent under (taken when the block opens, which
    #: is when the client's completion order counts it, see ``SegmentStoreClient._advance``).
    open_rid: int = 0
    #: The first ``append_many`` call that can have events in the open block (calls are
    #: numbered in order; only a failure of the writer needs this, see ``_fail_calls``).
    open_call: int = 0
    segment: str
    writer_id: uuid.UUID
    send_due: bool = False
    #: The timer that sends a non-full block after ``linger_ms`` ...
    linger: asyncio.Handle | None = None
    #: ... or, on a busy connection, when (``time.monotonic()``) its busy linger ends (0:
    #: none); ``SegmentStoreClient._sweep`` sends it then (one timer for all the writers).
    busy_until: float = 0.0
    #: ... or, with ``linger_ms`` 0, whether it waits in ``SegmentStoreClient._next_turn``.
    next_turn: bool = False
    in_flight: collections.deque[_Block] = dataclasses.field(default_factory=collections.deque)
    #: What waits for acks: the last event number each ``append_block`` call covers, and its
    #: future (two deques rather than one of pairs: no object per entry).
    call_lasts: collections.deque[int] = dataclasses.field(default_factory=collections.deque)
    call_waiters: collections.deque[_Waiter] = dataclasses.field(default_factory=collections.deque)
    #: Set when a block in flight is answered; made when someone first waits for room.
    room: asyncio.Event | None = None

    @property
    def next_event_number(self) -> int:
        return self.open_first + len(self.open_events)

    def block_bytes(self) -> int:
        """The bytes the open block will carry (event headers counted, unless raw)."""
        if self.open_size >= 0:
            return len(self.open_events) * (self.open_size + _EVENT_HEADER_BYTES)
        return self.open_bytes

    def open_full(self, limits: AppendLimits) -> bool:
        """Whether the open block takes no more events (of its size, while of one size)."""
        return (
            len(self.open_events) >= self.open_cap or self.block_bytes() >= limits.block_bytes_max
        )

    def unacked(self) -> list[tuple[int, bytes]]:
        blocks = [*self.in_flight, (-1, self.open_first, -1, self.open_events, -1)]
        return [(b[1] + i, e) for b in blocks for i, e in enumerate(b[3])]

    def add_call(self, last: int, waiter: _Waiter) -> None:
        self.call_lasts.append(last)
        self.call_waiters.append(waiter)

    async def wait_room(self) -> None:
        """Until a block in flight is answered (or the session fails)."""
        if self.room is None:
            self.room = asyncio.Event()
        self.room.clear()
        await self.room.wait()

    def wake(self) -> None:
        if self.room is not None:
            self.room.set()


@functools.lru_cache(maxsize=4096)
def _uniform_cap(limits: AppendLimits, size: int) -> int:
    """How many events of ``size`` bytes one block holds (at least one). (Cached: besides
    saving the sum, every writer's block of one size then holds the same int object, one
    the CPU's caches keep, not one of its own per writer.)"""
    return max(
        1, min(limits.block_events_max, limits.block_bytes_max // (size + _EVENT_HEADER_BYTES))
    )


_Waiter = asyncio.Future[AppendAck]

#: A writer's append state on one connection, as ``SegmentStoreClient.writer_handle`` gives
#: it: opaque to the caller, who may pass it wherever a writer id is taken. A producer spreading
#: events over thousands of writers saves the lookup by id (and the cache misses it costs).
WriterHandle = _Session


class _ClientProtocol(asyncio.BufferedProtocol):
    def __init__(self, client: SegmentStoreClient) -> None:
        self.client = client
        self.assembler = wire.FrameAssembler()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client._transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=SEND_BUFFER_BYTES)  # type: ignore[attr-defined]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.assembler.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        client = self.client
        try:
            for type_code, payload in self.assembler.buffer_updated(nbytes):
                if type_code == _DATA_APPENDED_TYPE and len(payload) == _DATA_APPENDED.size:
                    writer, number, previous, _rid, offset = _DATA_APPENDED.unpack(payload)
                    client._data_appended(int.from_bytes(writer), number, previous, offset)
                    continue
                client._on_reply(wire.decode_frame(type_code, payload, lenient=True))
        except wire.ProtocolError as exc:
            self.client._abort(ConnectionLostError(f"undecodable reply: {exc}"))
        if client._resolved:
            client._advance()

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._congested = False
        self.client._writable.set()
        self.client._on_lost(exc)

    def pause_writing(self) -> None:
        """The transport's send buffer is over its high-water mark (the server reads slower
        than we append): blocks that are not full stay open (see ``SegmentStoreClient._pump``)
        instead of growing the buffer."""
        self.client._congested = True

    def resume_writing(self) -> None:
        self.client._congested = False
        self.client._flush_out()  # (and the held blocks)


# --------------------------------------------------------------------------------------------
# the async client


class SegmentStoreClient:
    """An async connection to one segment store. Use ``await SegmentStoreClient.connect(...)``."""

    def __init__(
        self,
        *,
        delegation_token: str = "",
        request_timeout: float = 30.0,
        limits: AppendLimits | None = None,
        token_refresh: Callable[[], Awaitable[str]] | None = None,
    ) -> None:
        self.delegation_token = delegation_token
        #: Gets a new ``delegation_token`` when the segment store says it has expired (the
        #: request is then sent once more with it); ``None``: the error is raised.
        self.token_refresh = token_refresh
        self.request_timeout = request_timeout
        self.limits = limits or AppendLimits()
        self._transport: asyncio.Transport | None = None
        #: Encoded commands not yet handed to the transport (see ``_send``).
        self._out: list[bytes | bytearray | memoryview] = []
        self._out_scheduled = False
        self._request_ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        #: Append sessions by ``writer_id.int`` (an int hashes in C; a UUID in Python).
        self._sessions: dict[int, _Session] = {}
        #: Request id of a block in flight -> its writer's ``writer_id.int``.
        self._blocks: dict[int, int] = {}
        self._hello: asyncio.Future[wire.Hello] | None = None
        self._lost: SegmentStoreError | None = None
        self._closed = asyncio.get_running_loop().create_future()
        #: Append blocks sent on this connection (diagnostics: events per block).
        self.blocks_sent = 0
        #: The transport's send buffer is over SEND_BUFFER_BYTES (see ``_ClientProtocol``).
        self._congested = False
        #: Writers with a block due but held open while congested, oldest first, by
        #: ``writer_id.int``; sent in that order when the transport drains.
        self._held: dict[int, _Session] = {}
        #: Bytes in open blocks over all writers.
        self._open_bytes = 0
        #: Writers whose open block goes on the next loop turn (``linger_ms`` 0).
        self._next_turn: list[_Session] = []
        #: Whether the connection is busy (see ``AppendLimits.busy_blocks``), judged each
        #: BUSY_WINDOW_S from the events handed to it (not those sent: lingering blocks go
        #: in bursts) in the window.
        self._busy = False
        self._window_start = 0.0
        self._window_events = 0
        #: Writers whose block lingers because the connection is busy, in the order their
        #: lingers end, and the timer of the next ``_sweep``.
        self._lingering: collections.deque[_Session] = collections.deque()
        self._sweeper: asyncio.TimerHandle | None = None
        #: Clear while appends must wait: congested with OPEN_BYTES_MAX in open blocks.
        self._writable = asyncio.Event()
        self._writable.set()
        # Completion of ``append_many`` calls, counted per connection rather than per writer
        # and call: every block gets a place in the order blocks are opened; a call is done
        # once every block opened before it returned is answered (those hold all its events).
        #: Request ids of the blocks not yet answered, oldest opened first (answered ones
        #: leave once they reach the front) ...
        self._order: collections.deque[int] = collections.deque()
        #: ... the answered (or failed) ones still in it ...
        self._resolved: set[int] = set()
        #: ... and how many have left it (so blocks opened so far: this + len(_order)).
        self._order_done = 0
        #: ``append_many`` calls to complete: (blocks opened when the call returned, call
        #: number), in the order they returned; each call's future and writers by number
        #: (the writers as a list of sessions: the caller's thousands of pairs kept until the
        #: acks would make the garbage collector's passes cost a third of the producer).
        self._calls: collections.deque[tuple[int, int]] = collections.deque()
        self._call_futures: dict[int, asyncio.Future[None]] = {}
        self._call_writers: dict[int, list[_Session]] = {}
        #: The number of the ``append_many`` call running, or of the next one: no event added
        #: from now on belongs to an earlier call (calls add theirs one at a time).
        self._call_floor = 0
        #: Set while an ``append_many`` call adds its events; the calls waiting for their turn.
        self._many_busy = False
        self._many_gate: collections.deque[asyncio.Future[None]] = collections.deque()
        #: Writers failed since the calls were last checked, by ``id`` of session: (the first
        #: call that can have an unacknowledged event of theirs, the error); see ``_fail_calls``.
        self._call_failures: dict[int, tuple[int, SegmentStoreError]] = {}

    @classmethod
    async def connect(cls, host: str, port: int, **kwargs: Any) -> SegmentStoreClient:
        """Open a connection and exchange Hello (raises ConnectionLostError on a version clash)."""
        client = cls(**kwargs)
        loop = asyncio.get_running_loop()
        await loop.create_connection(lambda: _ClientProtocol(client), host, port)
        await client._handshake()
        return client

    async def _handshake(self) -> None:
        self._hello = asyncio.get_running_loop().create_future()
        self._send(wire.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION))
        hello = await asyncio.wait_for(self._hello, self.request_timeout)
        if not hello.low_version <= wire.WIRE_VERSION <= hello.high_version:
            low, high = hello.low_version, hello.high_version
            error = ConnectionLostError(f"server speaks versions {low}..{high}, not {WIRE}")
            self._abort(error)
            raise error

    async def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._flush_out(everything=True)  # queued commands go out before it closes
            self._transport.close()
        if self._transport is not None:
            await asyncio.shield(self._closed)

    async def __aenter__(self) -> SegmentStoreClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def is_closed(self) -> bool:
        return self._lost is not None

    # -- plumbing -------------------------------------------------------------------------------

    def _send(self, cmd: Any) -> None:
        """Queue a command; those queued during one event-loop turn (e.g. the blocks of many
        writers whose linger expired together) go out in one write (one syscall)."""
        if self._lost is not None:
            raise self._lost
        assert self._transport is not None
        self._out.extend(wire.encode_parts(cmd))
        if not self._out_scheduled:
            self._out_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_out)

    def _flush_out(self, *, everything: bool = False) -> None:
        """Hand the queued commands to the transport, WRITE_CHUNK_BYTES at a time, until it is
        congested (the rest wait for ``resume_writing``, unless ``everything``)."""
        self._out_scheduled = False
        transport, out = self._transport, self._out
        if transport is None or transport.is_closing():
            out.clear()
        elif out:
            start = size = 0
            last = len(out)
            for end, part in enumerate(out, 1):
                size += len(part)
                if size >= WRITE_CHUNK_BYTES or end == last:
                    if self._congested and not everything:
                        break
                    transport.writelines(out[start:end])  # may call pause_writing
                    start, size = end, 0
            if start:
                del out[:start]
        if not self._congested and (self._held or not self._writable.is_set()):
            self._release_held()  # (which lets waiting appends go on)

    def _judge_busy(self) -> None:
        """Each BUSY_WINDOW_S: whether the connection is busy (``AppendLimits.busy_blocks``)."""
        now = time.monotonic()
        if now - self._window_start >= BUSY_WINDOW_S:
            limits = self.limits
            rate = self._window_events / (now - self._window_start)
            self._busy = (
                limits.busy_linger_ms > 0
                and rate >= limits.busy_events_per_s
                and len(self._order) >= limits.busy_blocks
            )
            self._window_start, self._window_events = now, 0

    def _release_held(self) -> None:
        """The transport took what it had: send held blocks, oldest first, up to one send
        buffer's worth per loop turn (the rest go after ``_flush_out`` wrote these)."""
        budget = SEND_BUFFER_BYTES
        held = self._held
        for key in list(held):  # (a snapshot: popping the first again and again is quadratic)
            if budget <= 0 or self._congested or self._lost is not None:
                break
            session = held.pop(key)
            budget -= session.block_bytes()
            self._pump(session)
        if not self._congested or self._open_bytes <= OPEN_BYTES_MAX:
            self._writable.set()

    def _token(self, token: str | None) -> str:
        return self.delegation_token if token is None else token

    async def _call(self, make: Any, expected: type[T], *, refreshed: bool = False) -> T:
        """Send ``make(request_id)`` and wait for its reply; error replies are raised, except
        an expired default token once: ``token_refresh`` renews it and the request goes again
        (a token the caller passed is left to the caller)."""
        request_id = next(self._request_ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self._send(make(request_id))
            reply = await asyncio.wait_for(future, self.request_timeout)
        finally:
            self._pending.pop(request_id, None)
        if isinstance(reply, expected):
            return reply
        error = error_from_reply(reply)
        if (
            isinstance(error, AuthTokenCheckFailedError)
            and error.expired
            and self.token_refresh is not None
            and not refreshed
        ):
            self.delegation_token = await self.token_refresh()
            return await self._call(make, expected, refreshed=True)
        raise error

    def _on_reply(self, reply: Any) -> None:
        if isinstance(reply, wire.DataAppended):
            self._on_data_appended(reply)
            return
        if isinstance(reply, wire.Hello):
            if self._hello is not None and not self._hello.done():
                self._hello.set_result(reply)
            return
        request_id = getattr(reply, "request_id", None)
        future = self._pending.pop(request_id, None) if request_id is not None else None
        if future is not None:
            if not future.done():
                future.set_result(reply)
        elif request_id in self._blocks:
            self._on_block_error(request_id, reply)
        elif not isinstance(reply, wire.KeepAlive):
            log.warning("segment store sent an unsolicited %r", reply)
            if request_id == wire.NO_REQUEST_ID and isinstance(reply, wire.ErrorMessage):
                self._lost = ConnectionLostError(f"server closed the connection: {reply.message}")

    def _on_lost(self, exc: Exception | None) -> None:
        lost = self._lost or ConnectionLostError(f"connection lost: {exc or 'closed'}")
        self._lost = lost
        for future in self._pending.values():
            if not future.done():
                future.set_exception(lost)
        self._pending.clear()
        if self._hello is not None and not self._hello.done():
            self._hello.set_exception(lost)
        for session in list(self._sessions.values()):
            self._fail_session(session, None)
        self._advance()
        if not self._closed.done():
            self._closed.set_result(None)

    def _abort(self, error: SegmentStoreError) -> None:
        self._lost = self._lost or error
        if self._transport is not None:
            self._transport.abort()

    # -- request/response -----------------------------------------------------------------------

    async def create_segment(self, segment: str, *, token: str | None = None) -> None:
        def make(rid: int) -> Any:
            return wire.CreateSegment(rid, segment, 0, 0, self._token(token), 0)

        await self._call(make, wire.SegmentCreated)

    async def get_info(self, segment: str, *, token: str | None = None) -> SegmentInfo:
        def make(rid: int) -> Any:
            return wire.GetStreamSegmentInfo(rid, segment, self._token(token))

        r = await self._call(make, wire.StreamSegmentInfo)
        return SegmentInfo(
            r.segment_name, r.exists, r.is_sealed, r.is_deleted, r.last_modified,
            r.write_offset, r.start_offset,
        )  # fmt: skip

    async def read_segment(
        self,
        segment: str,
        offset: int,
        length: int = READ_BYTES_DEFAULT,
        *,
        token: str | None = None,
    ) -> ReadResult:
        """Up to ``length`` bytes at ``offset``; at the tail the server waits a little for data."""

        def make(rid: int) -> Any:
            return wire.ReadSegment(segment, offset, length, self._token(token), rid)

        r = await self._call(make, wire.SegmentRead)
        return ReadResult(r.offset, bytes(r.data), r.at_tail, r.end_of_segment)

    async def seal(self, segment: str, *, token: str | None = None) -> None:
        await self._call(
            lambda rid: wire.SealSegment(rid, segment, self._token(token)), wire.SegmentSealed
        )

    async def truncate(self, segment: str, offset: int, *, token: str | None = None) -> None:
        def make(rid: int) -> Any:
            return wire.TruncateSegment(rid, segment, offset, self._token(token))

        await self._call(make, wire.SegmentTruncated)

    async def delete(self, segment: str, *, token: str | None = None) -> None:
        await self._call(
            lambda rid: wire.DeleteSegment(rid, segment, self._token(token)), wire.SegmentDeleted
        )

    async def merge(self, target: str, source: str, *, token: str | None = None) -> int:
        """Append all of ``source`` to ``target`` and delete it; returns the new target length."""

        def make(rid: int) -> Any:
            return wire.MergeSegments(rid, target, source, self._token(token))

        return (await self._call(make, wire.SegmentsMerged)).new_target_write_offset

    async def get_attribute(
        self, segment: str, attribute_id: uuid.UUID, *, token: str | None = None
    ) -> int:
        def make(rid: int) -> Any:
            return wire.GetSegmentAttribute(rid, segment, attribute_id, self._token(token))

        return (await self._call(make, wire.SegmentAttribute)).value

    async def update_attribute(
        self,
        segment: str,
        attribute_id: uuid.UUID,
        new_value: int,
        expected_value: int = NULL_ATTRIBUTE_VALUE,
        *,
        token: str | None = None,
    ) -> bool:
        """Set the attribute if its value is ``expected_value`` (NULL: absent); False if not."""

        def make(rid: int) -> Any:
            return wire.UpdateSegmentAttribute(
                rid, segment, attribute_id, new_value, expected_value, self._token(token)
            )

        return (await self._call(make, wire.SegmentAttributeUpdated)).success

    # -- appends --------------------------------------------------------------------------------

    async def setup_append(
        self, segment: str, writer_id: uuid.UUID, *, token: str | None = None
    ) -> int:
        """Start appending to ``segment`` as ``writer_id``; returns its last persisted event
        number (NO_EVENT_NUMBER for a new writer). Numbering continues after it."""

        def make(rid: int) -> Any:
            return wire.SetupAppend(rid, writer_id, segment, self._token(token))

        old = self._sessions.get(writer_id.int)
        if old is not None and (old.call_lasts or old.in_flight or old.open_events):
            raise InvalidArgumentError(f"writer {writer_id} still has appends pending")
        last = (await self._call(make, wire.AppendSetup)).last_event_number
        session = _Session(
            client=self, segment=segment, writer_id=writer_id, open_first=max(last, 0) + 1
        )
        old = self._sessions.get(writer_id.int)
        if old is not None and old.failure is None:  # its handles are stale from now on
            old.failure = InvalidArgumentError(
                f"writer handle of {writer_id} is stale: setup_append was called again"
            )
        self._sessions[writer_id.int] = session
        return last

    def writer_handle(self, writer_id: uuid.UUID) -> WriterHandle:
        """The writer's handle on this connection (after ``setup_append``): taken wherever a
        writer id is, it saves looking the writer up by id for every event."""
        return self._session(writer_id)

    async def append_block(
        self,
        writer_id: uuid.UUID | WriterHandle,
        events: bytes | Sequence[bytes],
        *,
        raw: bool = False,
    ) -> asyncio.Future[AppendAck]:
        """Queue events (one ``bytes`` or a sequence) for the writer; returns a future completed
        when all of them are acknowledged. Waits while ``blocks_in_flight_max`` blocks are out.
        ``raw``: the bytes are appended as they are, without event headers."""
        if not self._writable.is_set():
            await self._writable.wait()
        session = self._session(writer_id)
        batch: Sequence[bytes | bytearray | memoryview]
        batch = [events] if isinstance(events, _BYTES_LIKE) else events
        await self._fill_all(session, batch, raw)
        self._window_events += len(batch)
        future: asyncio.Future[AppendAck] = asyncio.get_running_loop().create_future()
        last = session.next_event_number - 1
        if batch or session.call_lasts:
            session.add_call(last, future)
            self._schedule(session)
        else:
            future.set_result(AppendAck(last, -1, -1))
        return future

    async def append_many(
        self, batches: Iterable[tuple[uuid.UUID | WriterHandle, bytes | Sequence[bytes]]]
    ) -> asyncio.Future[None]:
        """Queue several writers' events in one call: ``(writer, events)`` pairs (a writer id
        or, cheaper, its ``writer_handle``), each as
        ``append_block`` takes them (one ``bytes`` or a sequence; a writer may come more than
        once; its events keep their order); returns one future completed when all are
        acknowledged, or failed with the first error. For a producer spreading events over
        many segments: no coroutine, future or callback per writer, nothing per writer and
        call but its events, and calls complete in the order they were made. Nothing is
        queued if an event is too large or a writer is unknown or failed. (``batches`` may be
        any iterable: ``zip(writers, events)`` costs no tuple per pair.)"""
        if not self._writable.is_set():
            await self._writable.wait()
        if self._lost is not None:
            raise self._lost
        if self._many_busy or self._many_gate:  # another call waits for room in flight
            pairs = list(batches)
            found = self._check_many(pairs, [])  # (nothing is queued unless all pass)
            await self._many_turn()
            return await self._many_turn_taken(self._add_many(pairs, found, 0, 0, [], True))
        self._many_busy = True
        return await self._many_turn_taken(self._add_first(batches))

    async def _many_turn_taken(
        self, adding: Awaitable[asyncio.Future[None]]
    ) -> asyncio.Future[None]:
        """Run an ``append_many`` call's adding in its turn, then give the turn on."""
        try:
            return await adding
        finally:
            self._many_done()

    async def _add_first(self, batches: Iterable[tuple[Any, Any]]) -> asyncio.Future[None]:
        """``append_many`` in its turn at once: its pairs checked and added in one pass while
        they take the common path (``_add_at_once``), the rest checked, then added."""
        found: list[_Session] = []
        opened: list[_Session] = []
        start = -1
        try:
            start, added_bytes, rest = self._add_at_once(iter(batches), found, opened)
            if rest:
                self._check_many(rest, found)
        except BaseException:  # (a bad pair, or one not a pair at all)
            self._take_back(found if start < 0 else found[:start], opened)
            raise
        return await self._add_many(rest, found, start, added_bytes, opened, False)

    def _check_many(self, pairs: list[tuple[Any, Any]], found: list[_Session]) -> list[_Session]:
        """Check the writers and event sizes of ``pairs``, adding their sessions to ``found``;
        raises the first problem."""
        sessions = self._sessions
        limit = self.limits.event_bytes_max
        for writer, given in pairs:
            known = sessions.get(writer.int) if type(writer) is uuid.UUID else None
            session = known if known is not None and known.failure is None else None
            if session is None:
                session = self._session(writer)  # (a handle, or raises the reason)
            if type(given) is bytes or isinstance(given, _BYTES_LIKE):
                if len(given) > limit:
                    raise InvalidArgumentError(f"event of {len(given)} bytes exceeds {limit}")
            elif given:
                biggest = max(map(len, given))
                if biggest > limit:
                    raise InvalidArgumentError(f"event of {biggest} bytes exceeds {limit}")
            found.append(session)
        return found

    def _add_at_once(
        self, pairs: Iterator[tuple[Any, Any]], found: list[_Session], opened: list[_Session]
    ) -> tuple[int, int, list[tuple[Any, Any]]]:
        """Check and add the pairs in one pass while each is a ``bytes`` for a writer with its
        open block of that event size and room in it, or with no block open (the common case
        of a call spread over thousands of writers); returns how many it added (their sessions
        in ``found``; those whose block it opened, in ``opened`` too), their bytes, and the
        pairs left. Cheaper than a pass to check and one to add; ``_take_back`` undoes it when
        a later pair fails its check."""
        sessions = self._sessions
        limit = self.limits.event_bytes_max
        size = 0
        try:
            for writer, share in pairs:
                session = writer if type(writer) is _Session else sessions.get(writer.int)
                if (
                    session is None
                    or session.failure is not None
                    or session.client is not self
                    or type(share) is not bytes
                ):
                    break
                events = session.open_events
                n = len(share)
                if n == session.open_size and len(events) < session.open_cap:
                    events.append(share)
                elif not events and n <= limit:  # the block opens
                    self._open(session, False, n)
                    opened.append(session)
                    events.append(share)
                else:
                    break
                size += n
                found.append(session)
            else:
                return len(found), size + len(found) * _EVENT_HEADER_BYTES, []
        except AttributeError:  # not a writer id or handle: _check_many says so
            pass
        rest = [(writer, share), *pairs]
        return len(found), size + len(found) * _EVENT_HEADER_BYTES, rest

    def _take_back(self, found: list[_Session], opened: list[_Session]) -> None:
        """Undo ``_add_at_once``: nothing was sent or awaited meanwhile, so each session's last
        event is the one it added, and the blocks it opened are the last in the order."""
        for session in reversed(found):
            session.open_events.pop()
            if not session.open_events:
                session.open_size = -1
        for _ in opened:
            self._order.pop()
        opened.clear()

    async def _many_turn(self) -> None:
        """Wait until the ``append_many`` calls before this one have added their events."""
        turn = asyncio.get_running_loop().create_future()
        self._many_gate.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # handed the turn, then cancelled
                self._many_done()
            raise

    def _many_done(self) -> None:
        """This call added its events: the next waiting one goes on."""
        gate = self._many_gate
        while gate:
            turn = gate.popleft()
            if not turn.done():
                turn.set_result(None)  # (_many_busy stays set: handed over)
                return
        self._many_busy = False

    async def _add_many(
        self,
        pairs: list[tuple[Any, Any]],
        found: list[_Session],
        start: int,
        added_bytes: int,
        opened: list[_Session],
        waited: bool,
    ) -> asyncio.Future[None]:
        """The end of an ``append_many`` call, in its turn (so every writer gets the calls'
        events in the order of the calls' numbers): ``pairs``, checked (their sessions are
        ``found[start:]``; ``start`` pairs before them were added by ``_add_at_once``, with
        ``added_bytes`` and the blocks they ``opened``), go into their writers' open blocks
        through ``_fill_open`` and ``_fill_all`` (which may wait for room)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        number = self._call_floor
        self._call_futures[number] = future  # (a writer failing meanwhile fails it)
        self._call_writers[number] = found
        added = False
        try:
            for session, (_, share) in zip(
                itertools.islice(found, start, None), pairs, strict=True
            ):
                if waited and session.failure is not None:  # (it failed while we waited)
                    raise session.failure
                many = (share,) if isinstance(share, _BYTES_LIKE) else share
                if not many:
                    continue
                before = session.block_bytes()
                put = self._fill_open(session, many, False, 0)  # (no coroutine if it fits)
                added_bytes += session.block_bytes() - before
                if put < len(many):
                    waited = True
                    await self._fill_all(session, many[put:])
                opened.append(session)  # (_schedule: its last block is not sent yet)
                added = True
        except BaseException:
            self._call_futures.pop(number, None)
            self._call_writers.pop(number, None)
            raise
        finally:
            self._call_floor = number + 1
            self._open_bytes += added_bytes
            self._limit_open()
            for session in opened:
                self._schedule(session)
        self._window_events += start + len(pairs)
        if added or start:
            self._calls.append((len(self._order) + self._order_done, number))
            if not self._order:
                self._advance()
        else:
            del self._call_futures[number], self._call_writers[number]
            future.set_result(None)
        return future

    async def _fill_all(
        self,
        session: _Session,
        events: Sequence[bytes | bytearray | memoryview],
        raw: bool = False,
    ) -> None:
        """Put all ``events`` in the session's open blocks, sending full ones on the way."""
        before = session.block_bytes()
        try:
            added = self._fill_open(session, events, raw, 0)
            while added < len(events):  # the open block is full: send it, then go on
                self._open_bytes += session.block_bytes() - before
                await self._drain_open(session)
                before = session.block_bytes()
                added = self._fill_open(session, events, raw, added)
        finally:
            self._open_bytes += session.block_bytes() - before
            self._limit_open()

    def _limit_open(self) -> None:
        """While congested with OPEN_BYTES_MAX in open blocks, the next append waits for the
        transport to drain (``_release_held`` lets it go on)."""
        if self._congested and self._open_bytes > OPEN_BYTES_MAX:
            self._writable.clear()

    async def append_event(
        self, writer_id: uuid.UUID | WriterHandle, event: bytes
    ) -> asyncio.Future[AppendAck]:
        """``append_block`` of a single event."""
        return await self.append_block(writer_id, [event])

    async def flush(self, writer_id: uuid.UUID | WriterHandle | None = None) -> None:
        """Send every open block now and wait until all appends are acknowledged (of the
        writer, if one is given; raises its failure, or that of a call waited for)."""
        if writer_id is not None:
            sessions = [self._session(writer_id)]
        else:
            sessions = [s for s in self._sessions.values() if s.failure is None]
        waits: set[asyncio.Future[Any]] = set()
        for session in sessions:
            await self._drain_open(session)
            waits.update(session.call_waiters)
        if writer_id is None:
            waits.update(self._call_futures.values())
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
        session = self._session(writer_id)
        await self._drain_open(session)
        payload = bytes(data) if raw else wire.EVENT_HEADER.pack(0, len(data)) + bytes(data)
        number = session.open_first  # (no block open: drained)
        session.open_first += 1
        request_id = next(self._request_ids)
        self._order.append(request_id)
        future: asyncio.Future[AppendAck] = asyncio.get_running_loop().create_future()
        session.add_call(number, future)
        self._send_block(
            session,
            (request_id, number, number, (bytes(data),), self._call_floor),
            wire.ConditionalBlockEnd(
                session.writer_id, number, expected_offset, payload, request_id
            ),
        )
        return await future

    def _session(self, writer: uuid.UUID | WriterHandle) -> _Session:
        """The writer's session, given its id or its handle; raises why it takes no appends."""
        if type(writer) is _Session:
            if writer.client is not self:
                raise InvalidArgumentError(
                    f"writer handle of {writer.writer_id} belongs to another connection"
                )
            session: _Session | None = writer
        elif isinstance(writer, uuid.UUID):
            session = self._sessions.get(writer.int)
        else:
            raise InvalidArgumentError(f"not a writer id or handle: {writer!r}")
        if session is None:
            raise InvalidArgumentError(f"no setup_append for writer {writer}")
        if session.failure is not None:
            raise session.failure
        if self._lost is not None:
            raise self._lost
        return session

    def _fill_open(
        self,
        session: _Session,
        events: Sequence[bytes | bytearray | memoryview],
        raw: bool,
        start: int,
    ) -> int:
        """Put ``events[start:]`` in the open block until one does not fit (the block is then
        full, or holds the other kind of ``raw``, and must be sent first); returns the index of
        the first event not added. The hot loop of the client: keep it lean."""
        limits = self.limits
        overhead = 0 if raw else _EVENT_HEADER_BYTES
        opened = session.open_events
        for index in range(start, len(events)):
            event = events[index]
            if type(event) is not bytes:
                event = bytes(event)
            n = len(event)
            if n > limits.event_bytes_max:
                raise InvalidArgumentError(f"event of {n} bytes exceeds {limits.event_bytes_max}")
            if not opened:
                self._open(session, raw, n)
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

    def _open(self, session: _Session, raw: bool, size: int) -> None:
        """The session's block opens for its first event, of ``size`` bytes: it takes its
        request id and its place in the completion order, and counts by events of that size
        (``open_cap``) or, if ``raw``, by bytes."""
        rid = next(self._request_ids)
        session.open_rid = rid
        session.open_call = self._call_floor
        session.open_raw = raw
        if raw:
            session.open_size, session.open_bytes = -1, size
            session.open_cap = self.limits.block_events_max
        else:
            session.open_size, session.open_cap = size, _uniform_cap(self.limits, size)
        self._order.append(rid)

    def _advance(self) -> None:
        """Fail the ``append_many`` calls that failed writers had events of, let answered
        blocks leave the front of the completion order, then complete the calls that no block
        still open or in flight can hold events of."""
        if self._call_failures:
            self._fail_calls()
        order, resolved = self._order, self._resolved
        left = 0
        while order and order[0] in resolved:
            resolved.remove(order.popleft())
            left += 1
        self._order_done += left
        done = self._order_done
        calls, futures = self._calls, self._call_futures
        while calls and calls[0][0] <= done:
            number = calls.popleft()[1]
            self._call_writers.pop(number, None)
            future = futures.pop(number, None)
            if future is not None and not future.done():
                future.set_result(None)

    def _fail_calls(self) -> None:
        """Fail each pending ``append_many`` call that gave a writer failed since the last
        check an event it has not had acknowledged: a call numbered from the first that can
        have one in the writer's oldest unacknowledged block (events of a writer are numbered
        in the order of the calls). One pass over the pending calls' writers for all those
        that failed together (a lost connection fails them all)."""
        failures, self._call_failures = self._call_failures, {}
        first = min(call for call, _ in failures.values())
        for number, writers in self._call_writers.items():
            future = self._call_futures.get(number)
            if number < first or future is None or future.done():
                continue
            for session in writers:
                failure = failures.get(id(session))
                if failure is not None and number >= failure[0]:
                    future.set_exception(failure[1])
                    break

    async def _drain_open(self, session: _Session) -> None:
        """Send the open block now, waiting for room in flight when needed."""
        session.send_due = True
        while session.open_events:
            self._pump(session, hold_small=False)
            if session.open_events:
                await session.wait_room()
            if session.failure is not None:
                raise session.failure

    def _schedule(self, session: _Session) -> None:
        limits = self.limits
        if session.open_full(limits):
            session.send_due = True
            self._pump(session)
            return
        self._judge_busy()
        if self._busy and session.open_events and not (session.linger or session.busy_until):
            session.send_due = True  # (an ack meanwhile does not send it, see _pump)
            session.busy_until = time.monotonic() + limits.busy_linger_ms / 1000
            self._lingering.append(session)
            if self._sweeper is None:
                loop = asyncio.get_running_loop()
                self._sweeper = loop.call_later(BUSY_SWEEP_S, self._sweep)
            return
        if session.in_flight and session.block_bytes() < limits.small_block_bytes:
            session.send_due = True  # held: the next ack sends it (see ``_pump``)
        elif session.linger is None and not session.next_turn and session.open_events:
            loop = asyncio.get_running_loop()
            delay = limits.linger_ms / 1000
            if delay > 0:
                session.linger = loop.call_later(delay, self._linger_expired, session)
            else:  # the next loop turn: one callback for all the writers queued in this one
                session.next_turn = True
                self._next_turn.append(session)
                if len(self._next_turn) == 1:
                    loop.call_soon(self._send_next_turn)

    def _send_next_turn(self) -> None:
        queued, self._next_turn = self._next_turn, []
        for session in queued:
            if session.next_turn:  # (not sent meanwhile)
                self._linger_expired(session)

    def _sweep(self) -> None:
        """Send the blocks whose busy linger ended (they are in that order), and come again
        while any is left."""
        self._sweeper = None
        lingering = self._lingering
        now = time.monotonic()
        while lingering and lingering[0].busy_until <= now:
            session = lingering.popleft()
            if session.busy_until:  # (else: sent meanwhile)
                session.busy_until = 0.0
                session.send_due = True
                self._pump(session)
        if lingering:
            self._sweeper = asyncio.get_running_loop().call_later(BUSY_SWEEP_S, self._sweep)

    def _linger_expired(self, session: _Session) -> None:
        session.linger = None
        session.next_turn = False
        session.send_due = True
        self._pump(session)

    def _pump(self, session: _Session, *, hold_small: bool = True) -> None:
        """Send the open block if it is due and there is room in flight. A block that is not
        full waits (``hold_small``) while the transport is congested (in ``_held``, until it
        drains), and a small one while its writer has a block in flight."""
        if session.failure is not None or self._lost is not None:
            return
        if not (session.open_events and session.send_due):
            return
        in_flight = len(session.in_flight)
        limits = self.limits
        if in_flight >= limits.blocks_in_flight_max:
            return
        if hold_small and not session.open_full(limits):
            if session.busy_until and self._busy:
                return  # (its linger sends it)
            if self._congested:
                self._held.setdefault(session.writer_id.int, session)
                return
            if in_flight and session.block_bytes() < limits.small_block_bytes:
                return
        first = session.open_first
        events = tuple(session.open_events)
        data = _block_data(events, session.open_size, session.open_raw)
        session.open_events.clear()
        session.open_first = first + len(events)
        self._open_bytes -= len(data)  # (= block_bytes(): headers, unless raw)
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

    def _send_block(self, session: _Session, block: _Block, cmd: Any) -> None:
        self.blocks_sent += 1
        session.in_flight.append(block)
        self._blocks[block[_RID]] = session.writer_id.int
        self._send(cmd)

    def _on_data_appended(self, reply: wire.DataAppended) -> None:
        self._data_appended(
            reply.writer_id.int,
            reply.event_number,
            reply.previous_event_number,
            reply.current_segment_write_offset,
        )

    def _data_appended(self, writer: int, number: int, previous: int, offset: int) -> None:
        """An ack for the writer whose ``writer_id.int`` is ``writer``."""
        session = self._sessions.get(writer)
        if session is None:
            return
        in_flight, blocks, resolved = session.in_flight, self._blocks, self._resolved
        while in_flight and in_flight[0][_LAST] <= number:
            rid = in_flight.popleft()[_RID]
            blocks.pop(rid, None)
            resolved.add(rid)  # (``_ClientProtocol`` advances the order after the read)
        if session.call_lasts:
            self._ack_calls(session, number, previous, offset)
        session.wake()
        self._pump(session)

    def _ack_calls(self, session: _Session, number: int, previous: int, offset: int) -> None:
        lasts, waiters = session.call_lasts, session.call_waiters
        while lasts and lasts[0] <= number:
            last = lasts.popleft()
            future = waiters.popleft()
            if not future.done():
                future.set_result(AppendAck(last, previous, offset))

    def _on_block_error(self, request_id: int, reply: Any) -> None:
        session = self._sessions.get(self._blocks.pop(request_id))
        if session is None:
            return
        error = error_from_reply(reply)
        if isinstance(reply, wire.ConditionalCheckFailed):
            self._fail_conditional(session, request_id, error)
        else:
            self._fail_session(session, error)
            self._advance()

    def _fail_conditional(self, session: _Session, request_id: int, error: Exception) -> None:
        block = next((b for b in session.in_flight if b[_RID] == request_id), None)
        if block is None:
            return
        session.in_flight.remove(block)
        self._resolved.add(request_id)
        self._advance()
        lasts, waiters = session.call_lasts, session.call_waiters
        for index in reversed(range(len(lasts))):
            if lasts[index] == block[_LAST]:
                waiter = waiters[index]
                del lasts[index], waiters[index]
                if not waiter.done():
                    waiter.set_exception(error)
        session.wake()
        self._pump(session)  # a block held for this one's answer goes now

    def _fail_session(self, session: _Session, error: SegmentStoreError | None) -> None:
        """Fail every pending append of the session (``None``: the connection was lost)."""
        if error is None:
            error = AppendsLostError(
                f"connection lost with appends of writer {session.writer_id} unacknowledged",
                writer_id=session.writer_id,
                unacked_events=session.unacked(),
                segment=session.segment,
            )
        session.failure = session.failure or error
        # the append_many calls that can have unacknowledged events of this writer: from the
        # first that can have events in its oldest block unacknowledged
        oldest = session.in_flight[0][_CALL] if session.in_flight else session.open_call
        if (session.in_flight or session.open_events) and self._call_futures:
            self._call_failures[id(session)] = (oldest, session.failure)
        for block in session.in_flight:
            self._blocks.pop(block[_RID], None)
            self._resolved.add(block[_RID])
        session.in_flight.clear()
        session.call_lasts.clear()
        while session.call_waiters:
            future = session.call_waiters.popleft()
            if not future.done():
                future.set_exception(error)
        self._open_bytes -= session.block_bytes()
        self._held.pop(session.writer_id.int, None)
        if session.open_events:
            self._resolved.add(session.open_rid)
        session.open_first += len(session.open_events)
        session.open_events.clear()
        session.open_bytes = 0
        session.open_size = -1
        session.wake()


def _block_data(events: tuple[bytes, ...], size: int, raw: bool) -> bytes:
    """An append block's bytes: the events, each behind its event header unless ``raw``.
    Events all of ``size`` bytes (-1: not known to be) share one header, joined in C."""
    if raw:
        return b"".join(events)
    if size >= 0:
        header = _EVENT_HEADER.pack(0, size)
        return header + header.join(events)
    pack = _EVENT_HEADER.pack
    return b"".join([part for event in events for part in (pack(0, len(event)), event)])
