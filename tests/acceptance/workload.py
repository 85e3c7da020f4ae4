"""A workload of idempotent writers over the wire protocol, its ledger, and the checker.

Responsibility: what the whole-process tests write and how they judge what they read back.

* Events carry their writer, a routing key, their event number (the writer's sequence) and a
  CRC32 of the rest, so the checker can tell each event apart and see damage (``encode_event``).
* Each writer appends fixed blocks of ``block_events`` events to its segment (segments may be
  shared), many blocks in flight. The ``Ledger`` records every event whose block was
  acknowledged (DataAppended), as the test process saw it.
* After a crash a writer reconnects, ``setup_append`` tells it the last persisted event number,
  and it re-sends, with the same numbers and the same block boundaries, every block it has no
  acknowledgement for *and* its last acknowledged block or two, as a writer whose
  acknowledgements were lost on the way would. Only the server's deduplication keeps those
  re-sent events from being stored twice: that is what the dedup tests lean on.
* ``check`` reads every segment back over the wire and reports acknowledged events that are
  missing, events stored twice, events out of writer order, damaged events (bad framing or
  checksum, or not what was acknowledged), and events never sent (or, ``exact``, never
  acknowledged).

Everything random comes from the seed; only the timing of the processes is not repeatable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import struct
import uuid
import zlib
from collections.abc import Sequence

from millrace.client.transport.segment_store import (
    NO_EVENT_NUMBER,
    AppendAck,
    AppendLimits,
    ConnectionLostError,
    SegmentNotFoundError,
    SegmentStoreClient,
    SegmentStoreError,
)

__all__ = [
    "Block",
    "CheckReport",
    "Ledger",
    "Workload",
    "check",
    "decode_event",
    "encode_event",
    "judge",
]

HOST = "127.0.0.1"
#: magic, writer index, routing key, event number, body length (then body, then CRC32).
_EVENT = struct.Struct(">4sHHQH")
_CRC = struct.Struct(">I")
_MAGIC = b"MREV"
#: The wire protocol's event header: type (0) and payload length, big-endian.
_WIRE_EVENT = struct.Struct(">ii")
_PAYLOAD_BYTES_MAX = _EVENT.size + 65535 + _CRC.size
#: Errors that mean "the node went away" (a kill), not "the node refused".
_LOST = (ConnectionLostError, ConnectionError, TimeoutError)
_EXAMPLES = 5


# -- events ----------------------------------------------------------------------------------


def encode_event(writer: int, key: int, number: int, body: bytes) -> bytes:
    """An event payload: header, body and the CRC32 of both."""
    head = _EVENT.pack(_MAGIC, writer, key, number, len(body)) + body
    return head + _CRC.pack(zlib.crc32(head))


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    writer: int
    key: int
    number: int
    checksum: int


def decode_event(payload: bytes) -> Event:
    """The event in ``payload``; ValueError if its framing or checksum is wrong."""
    if len(payload) < _EVENT.size + _CRC.size:
        raise ValueError(f"event of {len(payload)} bytes is too short")
    magic, writer, key, number, size = _EVENT.unpack_from(payload)
    if magic != _MAGIC or len(payload) != _EVENT.size + size + _CRC.size:
        raise ValueError(f"bad event header (magic {magic!r}, body length {size})")
    (checksum,) = _CRC.unpack_from(payload, len(payload) - _CRC.size)
    if zlib.crc32(memoryview(payload)[: -_CRC.size]) != checksum:
        raise ValueError(f"checksum mismatch (writer {writer}, event {number})")
    return Event(writer, key, number, checksum)


def checksum_of(payload: bytes) -> int:
    return int(_CRC.unpack_from(payload, len(payload) - _CRC.size)[0])


@dataclasses.dataclass(frozen=True, slots=True)
class Block:
    """Events ``first .. first + len(events) - 1`` of one writer, always sent as one block."""

    first: int
    events: tuple[bytes, ...]

    @property
    def last(self) -> int:
        return self.first + len(self.events) - 1


# -- the ledger: what was acknowledged -----------------------------------------------------------


class Ledger:
    """What the test process saw acknowledged, per writer (event number -> checksum)."""

    def __init__(self, writers: int) -> None:
        self.acked: list[dict[int, int]] = [{} for _ in range(writers)]
        #: Highest event number each writer ever sent.
        self.sent_max: list[int] = [0] * writers
        #: Surprises seen while writing (e.g. setup_append below an acknowledged event).
        self.anomalies: list[str] = []

    def record_ack(self, writer: int, block: Block) -> None:
        acked = self.acked[writer]
        for number, payload in enumerate(block.events, block.first):
            acked[number] = checksum_of(payload)

    def acked_count(self) -> int:
        return sum(len(a) for a in self.acked)

    def note_setup(self, writer: int, last: int) -> None:
        """Check ``setup_append``'s last persisted event number against the acknowledgements."""
        acked = max(self.acked[writer], default=0)
        if last == NO_EVENT_NUMBER and acked:
            self.anomalies.append(f"writer {writer}: setup_append knows no event, {acked} acked")
        elif last != NO_EVENT_NUMBER and not acked <= last <= self.sent_max[writer]:
            self.anomalies.append(
                f"writer {writer}: setup_append returned {last}, acked up to {acked}, "
                f"sent up to {self.sent_max[writer]}"
            )


# -- writers ---------------------------------------------------------------------------------


def resume_numbering(client: SegmentStoreClient, writer_id: uuid.UUID, next_number: int) -> None:
    """Make ``client`` number the writer's next event ``next_number``.

    The client numbers events itself, continuing after what ``setup_append`` returned, so it
    never re-sends an event the server already holds. A writer that lost acknowledgements does
    exactly that, and these tests must: so they set the number the client continues with.
    """
    session = client.appends.sessions[writer_id.int]  # test-only: no public way to do this
    if session.open_events or session.in_flight:
        raise AssertionError("resume_numbering needs an idle session")
    session.open_first = next_number  # (no block open: the next event's number)


class Writer:
    """One idempotent writer: its view of what was acknowledged, and its append loop."""

    def __init__(self, workload: Workload, index: int, segment: str) -> None:
        self.workload = workload
        self.index = index
        self.segment = segment
        self.rng = random.Random(f"{workload.seed}:writer:{index}")
        self.writer_id = uuid.UUID(int=self.rng.getrandbits(128))
        self.keys = [self.rng.randrange(65536) for _ in range(3)]
        self.next_number = 1
        #: Blocks sent without an acknowledgement seen by this writer, by first event number.
        self.unacked: dict[int, Block] = {}
        #: The last acknowledged blocks (re-sent after a reconnect, as if their acks were lost).
        self.recent_acked: list[Block] = []

    def new_block(self) -> Block:
        size = self.workload.block_events
        events = []
        for number in range(self.next_number, self.next_number + size):
            body = self.rng.randbytes(self.rng.randrange(*self.workload.body_bytes))
            events.append(encode_event(self.index, self.rng.choice(self.keys), number, body))
        block = Block(self.next_number, tuple(events))
        self.next_number += size
        return block

    def blocks_to_resend(self) -> list[Block]:
        """The last acknowledged block or two, then every unacknowledged block, in order of
        their event numbers (not of ``unacked``'s insertion: a replayed block whose ack a kill
        cut off went back in at its end), each once."""
        replay = self.recent_acked[-self.rng.choice((1, 2)) :]
        by_first = {block.first: block for block in [*replay, *self.unacked.values()]}
        blocks = [by_first[first] for first in sorted(by_first)]
        for before, after in itertools.pairwise(blocks):
            if before.last + 1 != after.first:
                raise AssertionError(f"writer {self.index}: gap {before.last}..{after.first}")
        return blocks

    def on_ack(self, block: Block, future: asyncio.Future[AppendAck]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            if not isinstance(error, _LOST):
                self.workload.errors.append(f"writer {self.index}, event {block.last}: {error!r}")
            return
        ack = future.result()
        ledger = self.workload.ledger
        if ack.event_number != block.last:
            ledger.anomalies.append(f"writer {self.index}: ack {ack.event_number} for {block.last}")
        ledger.record_ack(self.index, block)
        if ack.previous_event_number >= block.last:
            self.workload.stats.duplicates_dropped += 1  # the server had it: a deduplicated resend
        self.unacked.pop(block.first, None)
        if not self.recent_acked or block.first > self.recent_acked[-1].first:
            self.recent_acked = [*self.recent_acked[-1:], block]

    async def run(self, port: int, stop: asyncio.Event) -> None:
        """Append until ``stop`` is set or the node goes away; every ack is settled on return."""
        try:
            client = await SegmentStoreClient.connect(
                HOST, port, limits=self.workload.limits, request_timeout=self.workload.timeout
            )
        except (OSError, *_LOST):
            return
        acks: list[asyncio.Future[AppendAck]] = []
        try:
            await self._append(client, stop, acks)
        except _LOST:
            pass  # the node was killed: the next round resumes
        except SegmentStoreError as error:
            self.workload.errors.append(f"writer {self.index}: {error!r}")
        finally:
            if acks:
                await asyncio.wait(acks, timeout=self.workload.timeout)
            await client.close()

    async def _append(
        self, client: SegmentStoreClient, stop: asyncio.Event, acks: list[asyncio.Future[AppendAck]]
    ) -> None:
        last = await client.setup_append(self.segment, self.writer_id)
        self.workload.ledger.note_setup(self.index, last)
        persisted = [b for b in self.unacked.values() if b.last <= last]
        self.workload.stats.unacked_but_persisted += len(persisted)
        resend = self.blocks_to_resend()
        resume_numbering(client, self.writer_id, resend[0].first if resend else self.next_number)
        pause = self.workload.pause_seconds
        self.workload.stats.blocks_resent += len(resend)
        for block in resend:
            acks.append(await self._send(client, block))
        while not stop.is_set():
            acks.append(await self._send(client, self.new_block()))
            await asyncio.sleep(self.rng.uniform(*pause))

    async def _send(self, client: SegmentStoreClient, block: Block) -> asyncio.Future[AppendAck]:
        self.unacked.setdefault(block.first, block)
        ledger = self.workload.ledger
        ledger.sent_max[self.index] = max(ledger.sent_max[self.index], block.last)
        future = await client.append_block(self.writer_id, block.events)
        future.add_done_callback(lambda f: self.on_ack(block, f))
        return future


@dataclasses.dataclass
class WorkloadStats:
    #: Blocks re-sent after a reconnect (unacknowledged, or replayed as if their ack was lost).
    blocks_resent: int = 0
    #: Re-sent blocks the server acknowledged as duplicates (it already held them).
    duplicates_dropped: int = 0
    #: Blocks whose ack a kill cut off although they were durable (setup_append said so).
    unacked_but_persisted: int = 0


class Workload:
    """Writers over segments: ``writer_segments[i]`` is writer i's segment index."""

    def __init__(
        self,
        seed: int,
        *,
        name: str = "acceptance",
        writer_segments: Sequence[int] = (0, 0, 1, 2),
        block_events: int = 8,
        body_bytes: tuple[int, int] = (16, 400),
        pause_seconds: tuple[float, float] = (0.005, 0.02),
        timeout: float = 20.0,
    ) -> None:
        self.seed = seed
        self.block_events = block_events
        self.body_bytes = body_bytes
        self.pause_seconds = pause_seconds
        self.timeout = timeout
        count = max(writer_segments) + 1
        self.segments = [f"{name}/stream{seed % 1000}/{i}.#epoch.0" for i in range(count)]
        self.ledger = Ledger(len(writer_segments))
        self.writers = [Writer(self, i, self.segments[s]) for i, s in enumerate(writer_segments)]
        # One block per append_block call, never split or merged: the same boundaries on resend.
        self.limits = AppendLimits(
            block_bytes_max=4 * 1024 * 1024, block_events_max=block_events, blocks_in_flight_max=8
        )
        #: Error replies the writers got (the node refused an append: fenced, failed ...).
        self.errors: list[str] = []
        self.stats = WorkloadStats()

    async def create_segments(self, port: int) -> None:
        async with await SegmentStoreClient.connect(HOST, port) as client:
            for segment in self.segments:
                await client.create_segment(segment)

    async def run(
        self, port: int, stop: asyncio.Event, writers: Sequence[Writer] | None = None
    ) -> None:
        """Run the writers (default: all) until ``stop`` is set or the node goes away."""
        chosen = self.writers if writers is None else writers
        await asyncio.gather(*(writer.run(port, stop) for writer in chosen))

    async def run_for(
        self, port: int, seconds: float, writers: Sequence[Writer] | None = None
    ) -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(seconds, stop.set)
        await self.run(port, stop, writers)


# -- the checker -----------------------------------------------------------------------------


@dataclasses.dataclass
class CheckReport:
    """What ``check`` found; ``ok`` when nothing is wrong."""

    events: int = 0
    missing: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    duplicates: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    out_of_order: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    corrupt: list[str] = dataclasses.field(default_factory=list)
    unexpected: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    unreadable: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.missing
            or self.duplicates
            or self.out_of_order
            or self.corrupt
            or self.unexpected
            or self.unreadable
        )

    def summary(self) -> str:
        parts = [f"{self.events} events read"]
        for name in (
            "missing",
            "duplicates",
            "out_of_order",
            "corrupt",
            "unexpected",
            "unreadable",
        ):
            found = getattr(self, name)
            if found:
                parts.append(f"{len(found)} {name} (e.g. {found[:_EXAMPLES]})")
        return "; ".join(parts)


async def check(port: int, workload: Workload, *, exact: bool = False) -> CheckReport:
    """Read every segment of ``workload`` back over the wire and ``judge`` it."""
    contents: dict[str, bytes | None] = {}
    unreadable = []
    async with await SegmentStoreClient.connect(HOST, port, request_timeout=30.0) as client:
        for segment in workload.segments:
            try:
                contents[segment] = await _read_all(client, segment)
            except SegmentNotFoundError:
                contents[segment] = None
            except SegmentStoreError as error:
                unreadable.append(f"{segment}: {error!r}")
    report = judge(contents, workload.ledger, exact=exact)
    report.unreadable.extend(unreadable)
    return report


def judge(contents: dict[str, bytes | None], ledger: Ledger, *, exact: bool = False) -> CheckReport:
    """Judge the segments' bytes (None: the segment does not exist) against ``ledger``.

    ``exact``: every event read must have been acknowledged (no crash left unacknowledged ones).
    """
    report = CheckReport()
    seen: list[set[int]] = [set() for _ in ledger.acked]
    for segment, data in contents.items():
        if data is not None:
            _judge_segment(segment, data, ledger, seen, report, exact)
    for writer, acked in enumerate(ledger.acked):
        report.missing.extend((writer, n) for n in sorted(acked.keys() - seen[writer]))
    return report


async def _read_all(client: SegmentStoreClient, segment: str) -> bytes:
    info = await client.get_info(segment)
    parts = []
    offset = info.start_offset
    while offset < info.write_offset:
        result = await client.read_segment(segment, offset, info.write_offset - offset)
        if not result.data:
            raise SegmentStoreError(f"{segment}: empty read at {offset} < {info.write_offset}")
        parts.append(result.data)
        offset += len(result.data)
    return b"".join(parts)


def _judge_segment(
    segment: str,
    data: bytes,
    ledger: Ledger,
    seen: list[set[int]],
    report: CheckReport,
    exact: bool,
) -> None:
    last_number: dict[int, int] = {}
    offset = 0
    while offset < len(data):
        if len(data) - offset < _WIRE_EVENT.size:
            report.corrupt.append(f"{segment}@{offset}: event header cut short")
            return
        event_type, length = _WIRE_EVENT.unpack_from(data, offset)
        start, offset = offset, offset + _WIRE_EVENT.size + length
        if event_type != 0 or not 0 < length <= _PAYLOAD_BYTES_MAX or offset > len(data):
            report.corrupt.append(f"{segment}@{start}: bad event header ({event_type}, {length})")
            return  # the framing is lost: nothing after this can be trusted
        try:
            event = decode_event(data[start + _WIRE_EVENT.size : offset])
        except ValueError as error:
            report.corrupt.append(f"{segment}@{start}: {error}")
            continue
        report.events += 1
        _judge_event(segment, start, event, ledger, seen, last_number, report, exact)


def _judge_event(
    segment: str,
    offset: int,
    event: Event,
    ledger: Ledger,
    seen: list[set[int]],
    last_number: dict[int, int],
    report: CheckReport,
    exact: bool,
) -> None:
    writer, number = event.writer, event.number
    if writer >= len(seen):
        report.corrupt.append(f"{segment}@{offset}: unknown writer {writer}")
        return
    acked = ledger.acked[writer].get(number)
    if acked is not None and acked != event.checksum:
        report.corrupt.append(f"{segment}@{offset}: writer {writer} event {number} is not the one")
    if number in seen[writer]:
        report.duplicates.append((writer, number))
    elif number < last_number.get(writer, 0):
        report.out_of_order.append((writer, number))
    if number > ledger.sent_max[writer] or (exact and acked is None):
        report.unexpected.append((writer, number))
    seen[writer].add(number)
    last_number[writer] = max(last_number.get(writer, 0), number)
