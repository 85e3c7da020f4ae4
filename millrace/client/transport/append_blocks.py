"""Append blocks and the per-writer state of a segment store client's append sessions.

Responsibility: the data the append side (``millrace.client.transport.appends``) works on: the
limits that batch appends into blocks (``AppendLimits``), one writer's state on a connection
(``Session``, handed to callers as a ``WriterHandle``), a block in flight as a plain tuple with
named indices, an append's acknowledgement (``AppendAck``), and a block's bytes
(``block_data``).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import uuid
from typing import Final

from millrace.client.errors import AppendsLostError, SegmentStoreError
from millrace.kernel import wire

__all__ = [
    "BLOCK_CALL",
    "BLOCK_EVENTS",
    "BLOCK_FIRST",
    "BLOCK_LAST",
    "BLOCK_RID",
    "EVENT_HEADER_BYTES",
    "AppendAck",
    "AppendLimits",
    "Block",
    "Session",
    "Waiter",
    "WriterHandle",
    "block_data",
    "kept_as_is",
    "uniform_cap",
]

EVENT_HEADER_BYTES = wire.EVENT_HEADER.size


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


#: A block in flight: (request id, number of its first event, of its last, its events, the
#: first ``append_many`` call that can have events in it). A plain tuple of ints and a tuple of
#: buffers: the garbage collector stops tracking such tuples, so thousands of blocks in flight
#: cost its full passes nothing (a class instance would).
Block = tuple[int, int, int, tuple[bytes | memoryview, ...], int]
#: The fields of a ``Block``, by name (request id, first and last event number, events, call).
BLOCK_RID: Final = 0
BLOCK_FIRST: Final = 1
BLOCK_LAST: Final = 2
BLOCK_EVENTS: Final = 3
BLOCK_CALL: Final = 4


@dataclasses.dataclass(slots=True, kw_only=True)
class Session:
    """One writer's append state on this connection. (The fields ``append_many`` touches for
    every pair come first, so that they share the object's first cache line: with thousands
    of writers each pair is a writer not in cache.)"""

    failure: SegmentStoreError | None = None
    #: Whose session it is: the append sessions of one connection, held only to be compared
    #: (a handle given to another connection is refused), never called.
    owner: object
    #: Events of the block being filled, numbered from ``open_first``. (Emptied, not replaced,
    #: when the block is sent: no new object per block.) Their event headers are made when it
    #: is sent (see ``block_data``) ...
    open_events: list[bytes | memoryview] = dataclasses.field(default_factory=list)
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
    #: is when the client's completion order counts it, see ``AppendSessions._advance``).
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
    #: none); ``AppendSessions._sweep`` sends it then (one timer for all the writers).
    busy_until: float = 0.0
    #: ... or, with ``linger_ms`` 0, whether it waits in ``AppendSessions._next_turn``.
    next_turn: bool = False
    in_flight: collections.deque[Block] = dataclasses.field(default_factory=collections.deque)
    #: What waits for acks: the last event number each ``append_block`` call covers, and its
    #: future (two deques rather than one of pairs: no object per entry).
    call_lasts: collections.deque[int] = dataclasses.field(default_factory=collections.deque)
    call_waiters: collections.deque[Waiter] = dataclasses.field(default_factory=collections.deque)
    #: Set when a block in flight is answered; made when someone first waits for room.
    room: asyncio.Event | None = None
    #: The highest event number the segment store acknowledged to this session (from the
    #: setup's last persisted number on). A call whose blocks were partly acknowledged when
    #: the session failed has its events up to this one stored.
    acked: int = wire.NO_EVENT_NUMBER

    @property
    def next_event_number(self) -> int:
        return self.open_first + len(self.open_events)

    def block_bytes(self) -> int:
        """The bytes the open block will carry (event headers counted, unless raw)."""
        if self.open_size >= 0:
            return len(self.open_events) * (self.open_size + EVENT_HEADER_BYTES)
        return self.open_bytes

    def open_full(self, limits: AppendLimits) -> bool:
        """Whether the open block takes no more events (of its size, while of one size)."""
        return (
            len(self.open_events) >= self.open_cap or self.block_bytes() >= limits.block_bytes_max
        )

    def unacked(self) -> list[tuple[int, bytes | memoryview]]:
        blocks = [*self.in_flight, (-1, self.open_first, -1, self.open_events, -1)]
        return [(b[1] + i, e) for b in blocks for i, e in enumerate(b[3])]

    def add_call(self, last: int, waiter: Waiter) -> None:
        self.call_lasts.append(last)
        self.call_waiters.append(waiter)

    def ack_calls(self, number: int, previous: int, offset: int) -> None:
        """The calls whose events are acknowledged up to ``number`` are done."""
        lasts, waiters = self.call_lasts, self.call_waiters
        while lasts and lasts[0] <= number:
            last = lasts.popleft()
            future = waiters.popleft()
            if not future.done():
                future.set_result(AppendAck(last, previous, offset))

    def fail_calls(self, error: Exception, last: int | None = None) -> None:
        """Fail the calls ending at event ``last`` with ``error`` (``None``: every call, the
        oldest first)."""
        lasts, waiters = self.call_lasts, self.call_waiters
        if last is None:
            lasts.clear()
            while waiters:
                waiter = waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(error)
            return
        for index in reversed(range(len(lasts))):
            if lasts[index] == last:
                waiter = waiters[index]
                del lasts[index], waiters[index]
                if not waiter.done():
                    waiter.set_exception(error)

    def lost_error(self, why: BaseException | None = None) -> AppendsLostError:
        """What its appends fail with when the connection is lost (``why``): the
        unacknowledged events."""
        reason = f" ({why})" if why is not None else ""
        return AppendsLostError(
            f"connection lost{reason} with appends of writer {self.writer_id} unacknowledged",
            writer_id=self.writer_id,
            unacked_events=self.unacked(),
            segment=self.segment,
        )

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
def uniform_cap(limits: AppendLimits, size: int) -> int:
    """How many events of ``size`` bytes one block holds (at least one). (Cached: besides
    saving the sum, every writer's block of one size then holds the same int object, one
    the CPU's caches keep, not one of its own per writer.)"""
    return max(
        1, min(limits.block_events_max, limits.block_bytes_max // (size + EVENT_HEADER_BYTES))
    )


Waiter = asyncio.Future[AppendAck]

#: A writer's append state on one connection, as ``AppendSessions.writer_handle`` gives
#: it: opaque to the caller, who may pass it wherever a writer id is taken. A producer spreading
#: events over thousands of writers saves the lookup by id (and the cache misses it costs).
WriterHandle = Session


def kept_as_is(event: object) -> bool:
    """Whether a raw append keeps ``event`` as it is instead of copying it: a read-only,
    contiguous memoryview of bytes (its owner promises not to change what is under it until
    the append is acknowledged; ``Transaction.write_framed``'s pieces are such views)."""
    return (
        type(event) is memoryview
        and event.readonly
        and event.c_contiguous
        and event.format in ("B", "b", "c")
    )


def block_data(events: tuple[bytes | memoryview, ...], size: int, raw: bool) -> bytes | memoryview:
    """An append block's bytes: the events, each behind its event header unless ``raw``.
    Events all of ``size`` bytes (-1: not known to be) share one header, joined in C. A raw
    block of one buffer is that buffer (sent from where it is, not copied)."""
    if raw:
        return events[0] if len(events) == 1 else b"".join(events)
    if size >= 0:
        header = wire.EVENT_HEADER.pack(0, size)
        return header + header.join(events)
    pack = wire.EVENT_HEADER.pack
    return b"".join([part for event in events for part in (pack(0, len(event)), event)])
