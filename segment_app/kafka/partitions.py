"""A partition as Kafka's clients see it: a segment whose events are numbered.

Responsibility: Kafka's offsets over a segment. A record is an event (the 8-byte header, then
the value); its offset is the number of events before it in the segment, counted from the
segment's creation, so that offsets are dense and every face's events are records. The
``PartitionLog`` keeps where events start at points of the segment (every ``STEP_BYTES``, and
the end of every append it made), so that an offset is found by a short scan forward; and it
stores a checkpoint (a record count at a byte offset) in two of the segment's attributes at
least every ``CHECKPOINT_BYTES``, so that a node that opens the partition after a restart or a
failover, or after tier-2 took the data, scans from there and not from the start. Offsets
before the checkpoint are found from the segment's start: byte 0 is offset 0 when the segment
was never truncated, and otherwise the events between its start and the checkpoint are counted
once, at the first need; points found by such scans are kept, so that a consumer reading from
far back scans each stretch once.

When the segment was truncated past the last checkpoint (retention removed events no Kafka
client ever asked for), the events removed are not known: the first event left is numbered as
if each removed event had been the smallest one (8 bytes). Offsets then skip numbers there,
but still rise with the bytes and never change once given (docs/components/kafka.md).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import uuid
from typing import Any

from millrace.kernel.naming import KAFKA_RECORDS_MARK
from millrace.kernel.wire.event_frame import EVENT_HEADER, EVENT_TYPE
from segment_app.engine.api import NULL_ATTRIBUTE_VALUE, AttributeUpdate, SegmentStoreAPI
from segment_app.engine.errors import BadOffsetError, SegmentExistsError, SegmentNotFoundError
from segment_app.kafka.record_meta import (
    ENTRY_HEAD,
    VOID,
    Entry,
    RecordMeta,
    decode_body,
    encode_entry,
    void_entry,
)

__all__ = ["CorruptPartitionError", "PartitionLog", "Partitions"]

log = logging.getLogger(__name__)

#: The segment attributes holding the checkpoint: a record count and the byte offset it is at.
CHECKPOINT_RECORDS = uuid.UUID("6b61666b-612d-7265-636f-726473000001")
CHECKPOINT_BYTES = uuid.UUID("6b61666b-612d-6279-7465-730000000002")
#: A point kept in memory at least this often (bytes scanned).
STEP_BYTES = 64 * 1024
#: A checkpoint stored at least this often (bytes scanned).
CHECKPOINT_EVERY_BYTES = 1024 * 1024
#: How much one read of a scan asks for.
SCAN_READ_BYTES = 1024 * 1024
_HEADER = EVENT_HEADER.size
#: Tries of an append that other writers' appends keep landing before.
APPEND_ATTEMPTS = 8


class CorruptPartitionError(Exception):
    """The segment holds bytes that are not events (a byte stream): no offsets."""


class PartitionLog:
    """One partition's offsets; made by ``Partitions.log``."""

    def __init__(self, store: SegmentStoreAPI, segment: str) -> None:
        self.store = store
        self.segment = segment
        #: (records, bytes) points where an event starts, rising in both.
        self._points: list[tuple[int, int]] = []
        self._point_bytes: list[int] = []
        #: The segment's start byte while the offset there is not known yet (opened from a
        #: checkpoint past a truncation point): counted at the first need (``_head_point``).
        self._head_unknown: int | None = None
        #: The end of what is counted: records before ``frontier_bytes``.
        self.frontier_records = 0
        self.frontier_bytes = 0
        self._stored_bytes = 0
        self._scan = asyncio.Lock()
        #: Set when this node appended to the partition (long fetches wake on it).
        self.appended = asyncio.Event()
        #: Where the next append goes (bytes, records), reserved ahead of the appends under
        #: way; None: not known (at first, and after an append did not land where reserved).
        self._next: tuple[int, int] | None = None
        self._under_way = 0
        self._settled = asyncio.Condition()
        #: The companion segment of the records' times, keys and headers.
        self.meta_segment = segment + KAFKA_RECORDS_MARK
        self._meta_ready = False
        #: Its entries' headers, in order (loaded at the first read of them).
        self._entries: list[Entry] | None = None
        self._entry_bases: list[int] = []

    async def open(self) -> None:
        """Start from the stored checkpoint, or the segment's start."""
        info = await self.store.get_info(self.segment)
        stored = await self.store.get_attributes(
            self.segment, [CHECKPOINT_RECORDS, CHECKPOINT_BYTES]
        )
        records, at = stored[CHECKPOINT_RECORDS], stored[CHECKPOINT_BYTES]
        if records == NULL_ATTRIBUTE_VALUE or at == NULL_ATTRIBUTE_VALUE:
            records, at = 0, 0
        if at < info.start_offset:  # truncated past the checkpoint (see the module's note)
            records, at = records + (info.start_offset - at) // _HEADER, info.start_offset
        if info.start_offset == 0 and at > 0:
            self._add_point(0, 0)  # (never truncated: offset 0 is byte 0)
        elif info.start_offset < at:
            self._head_unknown = info.start_offset  # (counted back from the checkpoint)
        self._stored_bytes = at
        self._add_point(records, at)
        self.frontier_records, self.frontier_bytes = records, at

    def _add_point(self, records: int, at: int) -> None:
        if self._point_bytes and at <= self._point_bytes[-1]:
            return
        self._points.append((records, at))
        self._point_bytes.append(at)

    def _insert_point(self, records: int, at: int) -> None:
        """Keep a point found by a scan behind the frontier (a later seek starts there)."""
        index = bisect.bisect_left(self._point_bytes, at)
        if index < len(self._point_bytes) and self._point_bytes[index] == at:
            return
        self._points.insert(index, (records, at))
        self._point_bytes.insert(index, at)

    async def _head_point(self) -> None:
        """Number the events between the segment's start and the first point, once: the
        partition was opened from a checkpoint and the segment starts before it (retention
        truncated it, but not past the checkpoint)."""
        head = self._head_unknown
        if head is None:
            return
        async with self._scan:
            if self._head_unknown is None:
                return
            records, until = self._points[0]
            self._insert_point(records - await self._count_from(head, until), head)
            self._head_unknown = None

    async def _count_from(self, position: int, until: int, records: int | None = None) -> int:
        """How many events lie from byte ``position`` to byte ``until``; given ``records``
        (the offset at ``position``), the points scanned past are kept."""
        count = 0
        while position < until:
            read = await self.store.read(
                self.segment, position, min(SCAN_READ_BYTES, until - position)
            )
            found, used = _count_events(read.data, self.segment, position, stop=until)
            if used == 0:
                raise CorruptPartitionError(f"{self.segment}: no event starts at byte {until}")
            count, position = count + found, position + used
            if records is not None:
                self._insert_point(records + count, position)
        return count

    # -- counting ---------------------------------------------------------------------------------

    async def catch_up(self, until: int | None = None) -> None:
        """Count the events up to byte ``until`` (None: the segment's end now)."""
        if until is not None and until <= self.frontier_bytes:
            return
        async with self._scan:
            if until is None:
                until = (await self.store.get_info(self.segment)).length
            last_point = self._point_bytes[-1] if self._point_bytes else 0
            while self.frontier_bytes < until:
                read = await self.store.read(
                    self.segment,
                    self.frontier_bytes,
                    min(SCAN_READ_BYTES, until - self.frontier_bytes),
                )
                data = read.data
                if not data:
                    break
                count, used = _count_events(data, self.segment, self.frontier_bytes)
                if used == 0:  # an event longer than one read: read its whole length
                    _, length = EVENT_HEADER.unpack_from(data)
                    read = await self.store.read(
                        self.segment, self.frontier_bytes, _HEADER + length
                    )
                    count, used = _count_events(read.data, self.segment, self.frontier_bytes)
                    if used == 0:
                        break
                self.frontier_records += count
                self.frontier_bytes += used
                if self.frontier_bytes - last_point >= STEP_BYTES:
                    self._add_point(self.frontier_records, self.frontier_bytes)
                    last_point = self.frontier_bytes
            await self._store_checkpoint()

    async def _store_checkpoint(self) -> None:
        if self.frontier_bytes - self._stored_bytes < CHECKPOINT_EVERY_BYTES:
            return
        try:
            await self.store_checkpoint_at(self.frontier_records, self.frontier_bytes)
        except Exception as exc:  # (a sealed segment, a container moving: counted again later)
            log.debug("no Kafka checkpoint on %s: %s", self.segment, exc)

    async def store_checkpoint_at(self, records: int, at: int) -> None:
        """Store that ``records`` events lie before byte ``at`` (before a truncation there)."""
        await self.store.update_attributes(self.segment, [
            AttributeUpdate(CHECKPOINT_RECORDS, records),
            AttributeUpdate(CHECKPOINT_BYTES, at),
        ])  # fmt: skip
        self._stored_bytes = max(self._stored_bytes, at)

    async def end_offset(self) -> int:
        """The offset the next record will have (the high watermark)."""
        await self.catch_up()
        return self.frontier_records

    async def start_offset(self) -> int:
        """The first offset still stored (the log start offset)."""
        info = await self.store.get_info(self.segment)
        await self._head_point()
        return await self.records_at(max(info.start_offset, self._points[0][1]))

    async def records_at(self, at: int) -> int:
        """The offset of the event that starts at byte ``at``."""
        if at == self.frontier_bytes:
            return self.frontier_records
        if at > self.frontier_bytes:
            await self.catch_up(at)
            if at == self.frontier_bytes:
                return self.frontier_records
        if at < self._points[0][1]:
            await self._head_point()
        index = bisect.bisect_right(self._point_bytes, at) - 1
        records, position = self._points[max(index, 0)]
        return records + await self._count_from(position, at, records)

    async def position_of(self, offset: int) -> int:
        """The byte where the event numbered ``offset`` starts (``offset`` ≤ the end)."""
        if offset >= self.frontier_records:
            await self.catch_up()
            if offset >= self.frontier_records:
                return self.frontier_bytes
        if offset < self._points[0][0]:
            await self._head_point()
        index = bisect.bisect_right(self._points, (offset, 1 << 62)) - 1
        records, position = self._points[max(index, 0)]
        while records < offset:
            read = await self.store.read(self.segment, position, SCAN_READ_BYTES)
            count, used = _count_events(read.data, self.segment, position, limit=offset - records)
            if used == 0:
                raise CorruptPartitionError(f"{self.segment}: no event {offset}")
            records += count
            position += used
            self._insert_point(records, position)
        return position

    # -- appending and reading ----------------------------------------------------------------

    async def append(
        self, count: int, data: bytes, body: bytes, writer_id: uuid.UUID | None = None,
        event_number: int | None = None,
    ) -> int | None:  # fmt: skip
        """Append ``count`` records: their values' events (``data``) and their times, keys and
        headers beside them (``body``; both ``record_meta.split``'s), durably; the offset of
        the first (None: the store had them already, a producer's retry). Each append is placed
        where the last one ends (``expected_offset``): when another writer got there first, the
        partition is counted again and the append retried."""
        for _ in range(APPEND_ATTEMPTS):
            start, base = await self._reserve(len(data), count)
            self._under_way += 1
            try:
                landed = self.store.append_nowait(
                    self.segment, data, writer_id=writer_id, event_number=event_number,
                    expected_offset=start,
                )  # fmt: skip
                meta = self.store.append_nowait(
                    self.meta_segment, encode_entry(base, start, count, body)
                )
                try:
                    result = await landed
                except BadOffsetError:
                    self._next = None
                    await self._void(meta, base, start)
                    continue
                except BaseException:
                    self._next = None
                    await self._void(meta, base, start)
                    raise
            finally:
                self._under_way -= 1
                async with self._settled:
                    self._settled.notify_all()
            if result.duplicate:
                self._next = None
                await self._void(meta, base, start)
                return None
            if self.frontier_bytes == start:
                self.frontier_records, self.frontier_bytes = base + count, result.length
                self._add_point(self.frontier_records, self.frontier_bytes)
                if self.frontier_bytes - self._stored_bytes >= CHECKPOINT_EVERY_BYTES:
                    await self._store_checkpoint()
            await self._meta_landed(meta, Entry(base, count, start, -1, len(body)))
            self.appended.set()
            self.appended = asyncio.Event()
            return base
        raise BadOffsetError(f"{self.segment}: other writers kept appending first")

    async def _reserve(self, size: int, count: int) -> tuple[int, int]:
        """(byte, offset) where an append of ``size`` bytes and ``count`` records goes."""
        if not self._meta_ready:
            await self._ensure_meta_segment()
        while self._next is None:
            async with self._settled:
                await self._settled.wait_for(lambda: self._under_way == 0)
            if self._next is None:
                await self.catch_up()
                self._next = (self.frontier_bytes, self.frontier_records)
        start, base = self._next
        self._next = (start + size, base + count)
        return start, base

    async def _ensure_meta_segment(self) -> None:
        with contextlib.suppress(SegmentExistsError):
            await self.store.create_segment(self.meta_segment)
        self._meta_ready = True

    async def _meta_landed(self, meta: asyncio.Future[Any], entry: Entry) -> None:
        """Once the entry is stored: known where its body lies (when the entries are loaded)."""
        try:
            result = await meta
        except Exception as exc:  # (the values are in: their keys and times are not)
            log.warning("%s: records stored without their keys and times: %s", self.segment, exc)
            return
        if self._entries is not None:
            entry.body_at = result.length - entry.body_length
            at = bisect.bisect_right(self._entry_bases, entry.base)
            self._entries.insert(at, entry)
            self._entry_bases.insert(at, entry.base)

    async def _void(self, meta: asyncio.Future[Any], base: int, start: int) -> None:
        with contextlib.suppress(Exception):
            await meta
            await self.store.append(self.meta_segment, void_entry(base, start))

    async def metadata(self, offset: int, count: int) -> dict[int, RecordMeta]:
        """The times, keys and headers of records ``offset`` to ``offset + count - 1`` that
        have them (records written by Millrace's own writers have none)."""
        entries = await self._load_entries()
        found: dict[int, RecordMeta] = {}
        index = max(bisect.bisect_right(self._entry_bases, offset) - 1, 0)
        end = offset + count
        for entry in entries[index:]:
            if entry.base >= end:
                break
            if entry.base + entry.count <= offset:
                continue
            read = await self.store.read(self.meta_segment, entry.body_at, entry.body_length)
            body = read.data
            while len(body) < entry.body_length:
                more = await self.store.read(
                    self.meta_segment, entry.body_at + len(body), entry.body_length - len(body)
                )
                if not more.data:
                    break
                body += more.data
            for i, meta in enumerate(decode_body(body, entry.count)):
                found[entry.base + i] = meta
        return found

    async def _load_entries(self) -> list[Entry]:
        """The companion segment's entries (voided ones left out), read once."""
        if self._entries is not None:
            return self._entries
        entries: list[Entry] = []
        try:
            info = await self.store.get_info(self.meta_segment)
        except SegmentNotFoundError:
            self._entries, self._entry_bases = entries, []
            return entries
        at, end, buffer, buffer_at = info.start_offset, info.length, b"", info.start_offset
        head = ENTRY_HEAD.size
        while at + head <= end:
            if at + head > buffer_at + len(buffer):
                read = await self.store.read(self.meta_segment, at, SCAN_READ_BYTES)
                buffer, buffer_at = read.data, at
                if len(buffer) < head:
                    break
            base, count, start, length = ENTRY_HEAD.unpack_from(buffer, at - buffer_at)
            if count == VOID:
                entries = [e for e in entries if not (e.base == base and e.start == start)]
            else:
                entries.append(Entry(base, count, start, at + head, length))
            at += head + max(length, 0)
        entries.sort(key=lambda e: e.base)
        self._entries, self._entry_bases = entries, [e.base for e in entries]
        return entries

    async def read(self, offset: int, max_bytes: int) -> list[bytes]:
        """The values of the events from ``offset`` on: at least one (if there is one), then as
        many as fit in ``max_bytes``."""
        position = await self.position_of(offset)
        want = max(max_bytes, _HEADER)
        buffer = b""
        while True:
            read = await self.store.read(self.segment, position + len(buffer), want - len(buffer))
            buffer += read.data
            values = self._values(buffer, position)
            if values or not read.data or read.at_tail:
                return values
            if len(buffer) >= _HEADER:  # (the first event is longer than asked: all of it)
                want = max(want, _HEADER + EVENT_HEADER.unpack_from(buffer)[1])

    def _values(self, data: bytes, position: int) -> list[bytes]:
        """The values of the whole events at the start of ``data`` (read at ``position``)."""
        values: list[bytes] = []
        used = 0
        unpack = EVENT_HEADER.unpack_from
        while used + _HEADER <= len(data):
            kind, length = unpack(data, used)
            if kind != EVENT_TYPE or length < 0:
                raise CorruptPartitionError(f"{self.segment}: not an event at {position + used}")
            end = used + _HEADER + length
            if end > len(data):
                break
            values.append(data[used + _HEADER : end])
            used = end
        return values


def _count_events(
    data: bytes, segment: str, at: int, stop: int | None = None, limit: int | None = None
) -> tuple[int, int]:
    """How many whole events ``data`` (read at byte ``at``) holds and their bytes; ending
    before byte ``stop`` or after ``limit`` events."""
    count = used = 0
    unpack = EVENT_HEADER.unpack_from
    size = len(data) if stop is None else min(len(data), stop - at)
    while used + _HEADER <= size:
        kind, length = unpack(data, used)
        if kind != EVENT_TYPE or length < 0:
            raise CorruptPartitionError(f"{segment}: not an event at byte {at + used}")
        end = used + _HEADER + length
        if end > size:
            break
        count += 1
        used = end
        if limit is not None and count >= limit:
            break
    return count, used


class Partitions:
    """The partitions this node has opened, by segment."""

    def __init__(self, store: SegmentStoreAPI) -> None:
        self.store = store
        self._logs: dict[str, PartitionLog] = {}
        self._opening: dict[str, asyncio.Future[PartitionLog]] = {}

    async def log(self, segment: str) -> PartitionLog:
        found = self._logs.get(segment)
        if found is not None:
            return found
        opening = self._opening.get(segment)
        if opening is not None:
            return await asyncio.shield(opening)
        future: asyncio.Future[PartitionLog] = asyncio.get_running_loop().create_future()
        self._opening[segment] = future
        try:
            partition = PartitionLog(self.store, segment)
            await partition.open()
            self._logs[segment] = partition
            future.set_result(partition)
            return partition
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # (retrieved: no warning when nobody else waited)
            raise
        finally:
            self._opening.pop(segment, None)

    def opened(self) -> dict[str, PartitionLog]:
        """The partitions this node has opened, by segment."""
        return dict(self._logs)

    def forget(self, segment: str) -> None:
        """Drop what is known of ``segment`` (its container moved, it was deleted)."""
        self._logs.pop(segment, None)
