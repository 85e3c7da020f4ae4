"""The read index: serves reads at any offset from the cache, tier-2, or a merged source.

Per segment it keeps cache entries sorted by offset. Appends are added once durable, coalesced
into entries of up to ``cache_entry_bytes_max`` (an append that would take one past it starts
the next, so that a bulk writer's megabyte appends are never joined): an entry keeps the
appended buffers as they came (no copy) and joins them into one when it is first read, or once
it holds ``PIECES_MAX`` of them; either way it then takes no more appends. (Growing one buffer
per segment, append by append, copied each byte several times as it was reallocated.) The
cache is bounded by ``cache_bytes_max``: entries are evicted oldest first, but only once their
bytes are in tier-2 (below the segment's storage length), so acknowledged data is always
readable; a transaction's shadow segment, which no reader reads, lets go of its entries as soon
as they are in tier-2 (``release_stored``). Entries that leave let go of their bytes at once.
Reads that miss the cache below the storage length fetch from tier-2 through the segment's
chunk list and populate the cache, unless the tier says re-reading is cheap without it
(``cache_reads``: local files).

With an on-disk cache (``disk_cache_path`` and ``disk_cache_bytes_max``; LMDB through
``DiskCache``), an entry evicted from memory goes to disk instead of away, whether or not it is
in tier-2 yet: reads find it there, the storage writer flushes it from there, and the data
waiting for tier-2 (the tier-1 backlog) is bounded by memory and disk together rather than by
memory. The disk's own oldest entries leave it once in tier-2.

A read at the tail of an unsealed segment waits for data (tail read). A merged transaction's
range reads from the source segment until the storage writer relinks its chunks into the
target.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import dataclasses

from segment_app.engine.api import ReadResult
from segment_app.engine.config import ReadIndexConfig
from segment_app.engine.containers.metadata import ContainerMetadata, SegmentMetadata
from segment_app.engine.errors import (
    BadOffsetError,
    SegmentNotFoundError,
    SegmentTruncatedError,
    TierUnavailableError,
)
from segment_app.engine.invariants import check
from segment_app.engine.logs.operations import AppendRecord
from segment_app.engine.reading.disk_cache import DiskCache, DiskCacheFullError
from tiers.base import ChunkNotFoundError, ChunkStorage, TierError

#: Pieces totalling at least this many bytes are joined in a worker thread (bytes.join lets go
#: of the GIL for large joins): a 4 MiB flush joined on the event loop held every ack for ~3 ms.
JOIN_IN_THREAD_BYTES = 512 * 1024

#: Appended buffers an entry keeps unjoined at most (each costs a few hundred bytes of objects).
PIECES_MAX = 32

#: Gone entries the eviction order may hold before it is rebuilt without them.
FIFO_SLACK = 1024

__all__ = ["PIECES_MAX", "ReadIndex"]

Buffer = bytes | bytearray | memoryview


@dataclasses.dataclass(slots=True, eq=False)
class _Entry:
    offset: int
    #: The entry's bytes: the buffers appended, in order (one once joined).
    pieces: list[Buffer]
    length: int
    live: bool = True
    #: It takes no more appends: joined (views of its bytes may be held) or full.
    closed: bool = False
    #: Its bytes are in the on-disk cache, not in ``pieces``.
    on_disk: bool = False

    @property
    def end(self) -> int:
        return self.offset + self.length

    def data(self) -> Buffer:
        """The entry's bytes, its pieces joined into one (once); it is closed from then on."""
        pieces = self.pieces
        if len(pieces) > 1:
            pieces[:] = [b"".join(pieces)]
        self.closed = True
        return pieces[0]


@dataclasses.dataclass(slots=True)
class _SegmentIndex:
    offsets: list[int] = dataclasses.field(default_factory=list)
    entries: list[_Entry] = dataclasses.field(default_factory=list)
    waiters: list[asyncio.Future[None]] = dataclasses.field(default_factory=list)

    def find(self, offset: int) -> int:
        """Index of the entry that starts at or before ``offset`` (-1 if none)."""
        return bisect.bisect_right(self.offsets, offset) - 1

    def insert(self, entry: _Entry) -> None:
        i = bisect.bisect_right(self.offsets, entry.offset)
        self.offsets.insert(i, entry.offset)
        self.entries.insert(i, entry)

    def remove(self, entry: _Entry) -> None:
        i = bisect.bisect_left(self.offsets, entry.offset)
        if i < len(self.entries) and self.entries[i] is entry:
            del self.offsets[i]
            del self.entries[i]


class ReadIndex:
    """Reads for one container (see the module doc)."""

    def __init__(
        self, metadata: ContainerMetadata, storage: ChunkStorage, config: ReadIndexConfig
    ) -> None:
        self.metadata = metadata
        self.storage = storage
        self.config = config
        #: Bytes of the entries held in memory.
        self.cache_bytes = 0
        self._segments: dict[int, _SegmentIndex] = {}
        self._fifo: collections.deque[tuple[int, _Entry]] = collections.deque()
        #: Entries released since the eviction order was last rid of gone ones.
        self._released = 0
        self.disk: DiskCache | None = None
        if config.disk_cache_path and config.disk_cache_bytes_max > 0:
            self.disk = DiskCache(config.disk_cache_path, config.disk_cache_bytes_max)
        self._disk_fifo: collections.deque[tuple[int, _Entry]] = collections.deque()

    def close(self) -> None:
        """Let go of the on-disk cache (its files are removed)."""
        if self.disk is not None:
            self.disk.close()
            self.disk = None

    # -- feeding ----------------------------------------------------------------------------------

    def append(self, segment_id: int, offset: int, data: bytes | memoryview) -> None:
        """Add durable appended bytes (called in operation order)."""
        self.append_records([(-1, segment_id, offset, bytes(data), None, 0)])

    def append_records(self, records: list[AppendRecord]) -> None:
        """Add the bytes of durable appends (called in operation order), without copying them:
        the read index keeps ``data`` of each record as it is."""
        segments, entry_max = self._segments, self.config.cache_entry_bytes_max
        added = 0
        for record in records:
            segment_id, offset, data = record[1], record[2], record[3]
            index = segments.get(segment_id)
            if index is None:
                index = segments[segment_id] = _SegmentIndex()
            entries = index.entries
            last = entries[-1] if entries else None
            n = len(data)
            if (
                last is not None
                and not last.closed
                and last.live
                and last.offset + last.length == offset
                and last.length + n <= entry_max  # (a full-size append: an entry of its own)
            ):
                pieces = last.pieces
                pieces.append(data)
                last.length += n
                if len(pieces) >= PIECES_MAX:
                    last.data()
            else:
                entry = _Entry(offset, [data], n)
                index.offsets.append(offset)
                entries.append(entry)
                self._fifo.append((segment_id, entry))
            added += n
            if index.waiters:
                self._wake(index)
        self.cache_bytes += added
        if self.cache_bytes > self.config.cache_bytes_max:
            self.evict()

    def notify(self, segment_id: int) -> None:
        """Wake tail readers of a segment (it was sealed, deleted or merged into)."""
        index = self._segments.get(segment_id)
        if index is not None:
            self._wake(index)

    def release_stored(self, segment_id: int) -> None:
        """Let go of a segment's cached bytes that are in tier-2, budget or not: for a
        transaction's shadow segment, which no reader reads (its merge relinks its chunks, and
        a read of the merged range before that reads them from tier-2), so that its memory
        serves the next appends instead of a first-touched page per 4 KiB of them."""
        index = self._segments.get(segment_id)
        segment = self.metadata.segments.get(segment_id)
        if index is None or segment is None:
            return
        stored = [e for e in index.entries if e.end <= segment.storage_length and e.live]
        for entry in stored:
            self._drop(segment_id, entry)

    def remove(self, segment_id: int) -> None:
        index = self._segments.pop(segment_id, None)
        if index is None:
            return
        for entry in index.entries:
            self._release(segment_id, entry)
        self._wake(index)

    def evict(self) -> None:
        """Until the memory cache fits its budget, move its oldest entries out: to the disk
        cache when there is one with room (in tier-2 yet or not), else away if in tier-2."""
        while self.cache_bytes > self.config.cache_bytes_max and self._fifo:
            segment_id, entry = self._fifo[0]
            if entry.live and not self._spill(segment_id, entry):
                segment = self.metadata.segments.get(segment_id)
                if segment is not None and entry.end > segment.storage_length:
                    return  # the oldest entry is not in tier-2 yet: nothing can go
                self._fifo.popleft()  # (before the drop, which may rebuild the order)
                self._drop(segment_id, entry)
            else:
                self._fifo.popleft()

    def _spill(self, segment_id: int, entry: _Entry) -> bool:
        """Move ``entry``'s bytes to the disk cache if there is one with room."""
        disk = self.disk
        if disk is None:
            return False
        while disk.bytes + entry.length > disk.bytes_max and self._disk_fifo:
            old_segment, old = self._disk_fifo[0]
            if old.live:
                segment = self.metadata.segments.get(old_segment)
                if segment is not None and old.end > segment.storage_length:
                    return False  # the disk holds only what tier-2 does not have yet
                self._drop(old_segment, old)
            self._disk_fifo.popleft()
        if disk.bytes + entry.length > disk.bytes_max:
            return False
        try:
            disk.put(segment_id, entry.offset, entry.data())
        except DiskCacheFullError:
            return False
        entry.pieces, entry.on_disk = [], True
        self.cache_bytes -= entry.length
        self._disk_fifo.append((segment_id, entry))
        return True

    def _drop(self, segment_id: int, entry: _Entry) -> None:
        self._release(segment_id, entry)
        index = self._segments.get(segment_id)
        if index is not None:
            index.remove(entry)

    def _release(self, segment_id: int, entry: _Entry) -> None:
        """``entry`` is gone: its bytes leave memory or the disk."""
        entry.live = False
        if entry.on_disk:
            assert self.disk is not None
            self.disk.delete(segment_id, entry.offset, entry.length)
        else:
            self.cache_bytes -= entry.length
            entry.pieces = []  # (it may wait in the eviction order a while: not with its bytes)
            self._released += 1
            if self._released > max(FIFO_SLACK, len(self._fifo) // 2):
                # Gone entries wait in the eviction order until eviction reaches them, which
                # a cache under its budget never does: drop them from it now and then.
                self._fifo = collections.deque(item for item in self._fifo if item[1].live)
                self._released = 0

    def _index(self, segment_id: int) -> _SegmentIndex:
        index = self._segments.get(segment_id)
        if index is None:
            index = self._segments[segment_id] = _SegmentIndex()
        return index

    @staticmethod
    def _wake(index: _SegmentIndex) -> None:
        if not index.waiters:  # (the common case: no tail reader; no new list per append)
            return
        waiters, index.waiters = index.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- reading ----------------------------------------------------------------------------------

    async def read(
        self, name: str, offset: int, max_length: int, wait_seconds: float = 0.0
    ) -> ReadResult:
        deadline = asyncio.get_running_loop().time() + wait_seconds
        while True:
            segment = self.metadata.get(name)
            if segment is None:
                raise SegmentNotFoundError(f"segment {name} does not exist", segment=name)
            _check_range(segment, offset)
            if offset < segment.length:
                data = await self._read_available(segment, offset, max(1, max_length))
                end = offset + len(data)
                at_tail = end >= segment.length
                return ReadResult(offset, data, at_tail, at_tail and segment.sealed)
            if segment.sealed:
                return ReadResult(offset, b"", True, True)
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return ReadResult(offset, b"", True, False)
            waiter = asyncio.get_running_loop().create_future()
            self._index(segment.segment_id).waiters.append(waiter)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await waiter

    async def read_unflushed(
        self, segment: SegmentMetadata, offset: int, length: int
    ) -> bytes | memoryview:
        """Bytes the storage writer is about to flush (pinned in the cache). A single cache
        entry comes back as a view, without a copy; the entry stops growing from then on."""
        return await self._read_available(segment, offset, length, exact=True)

    async def _read_available(
        self, segment: SegmentMetadata, offset: int, max_length: int, exact: bool = False
    ) -> bytes:
        end = min(segment.length, offset + max_length)
        parts: list[bytes | memoryview] = []
        position = offset
        while position < end:
            piece = await self._read_piece(segment, position, end, pin=exact)
            if not piece:
                break
            parts.append(piece)
            position += len(piece)
            if not exact and position - offset >= self.config.storage_read_bytes_max:
                break
        if len(parts) == 1:
            data = parts[0]
        elif position - offset >= JOIN_IN_THREAD_BYTES:
            data = await asyncio.to_thread(b"".join, parts)
        else:
            data = b"".join(parts)
        check(not exact or len(data) == max_length, "%s: short read of pinned data", segment.name)
        return data  # type: ignore[return-value]  # a view only when ``exact`` (read_unflushed)

    async def _read_piece(
        self, segment: SegmentMetadata, position: int, end: int, pin: bool = False
    ) -> bytes | memoryview:
        index = self._index(segment.segment_id)
        i = index.find(position)
        if i >= 0 and index.entries[i].end > position:
            entry = index.entries[i]
            start, stop = position - entry.offset, min(end, entry.end) - entry.offset
            if entry.on_disk:
                assert self.disk is not None
                return self.disk.get(segment.segment_id, entry.offset)[start:stop]
            if pin:
                return memoryview(entry.data())[start:stop]
            with memoryview(entry.data()) as view:
                return bytes(view[start:stop])
        next_start = index.offsets[i + 1] if i + 1 < len(index.offsets) else end
        for merge in segment.pending_merges:
            if merge.offset <= position < merge.offset + merge.length:
                return await self._read_merged(
                    merge.source_id,
                    position - merge.offset,
                    min(end, merge.offset + merge.length) - position,
                    pin,
                )
        if position < segment.storage_length:
            limit = min(end, next_start, segment.storage_length)
            return await self._read_storage(segment, index, position, limit)
        check(False, f"{segment.name}: bytes at {position} are neither cached nor stored")
        return b""

    async def _read_merged(
        self, source_id: int, offset: int, length: int, pin: bool
    ) -> bytes | memoryview:
        source = self.metadata.segments.get(source_id)
        check(source is not None, f"merged source {source_id} vanished before relinking")
        assert source is not None
        return await self._read_piece(source, offset, offset + length, pin)

    async def _read_storage(
        self, segment: SegmentMetadata, index: _SegmentIndex, position: int, limit: int
    ) -> bytes:
        chunks = segment.chunks
        i = bisect.bisect_right([c.start for c in chunks], position) - 1
        if i < 0 or chunks[i].end <= position:
            raise SegmentTruncatedError(
                f"{segment.name}: offset {position} is no longer stored",
                segment=segment.name,
                start_offset=segment.start_offset,
            )
        chunk = chunks[i]
        length = min(limit, chunk.end, position + self.config.storage_read_bytes_max) - position
        try:
            async with asyncio.timeout(self.config.storage_read_timeout_ms / 1000):
                data = await self.storage.read(chunk.name, position - chunk.start, length)
        except ChunkNotFoundError:
            raise SegmentTruncatedError(
                f"{segment.name}: offset {position} was truncated",
                segment=segment.name,
                start_offset=segment.start_offset,
            ) from None
        except (TierError, OSError, TimeoutError) as exc:
            cause = "no answer" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}"
            raise TierUnavailableError(
                f"{segment.name}: offset {position} is only in tier-2, which cannot be read now"
                f" ({cause}: {exc}); retry later",
                segment=segment.name,
            ) from exc
        entry = _Entry(position, [data], len(data), closed=True)
        if (
            self.storage.cache_reads
            and self._segments.get(segment.segment_id) is index
            and index.find(position) == index.find(position + length - 1)
        ):
            index.insert(entry)
            self._fifo.append((segment.segment_id, entry))
            self.cache_bytes += len(data)
            self.evict()
        return data


def _check_range(segment: SegmentMetadata, offset: int) -> None:
    if offset < segment.start_offset:
        raise SegmentTruncatedError(
            f"{segment.name}: offset {offset} is below the start offset {segment.start_offset}",
            segment=segment.name,
            start_offset=segment.start_offset,
        )
    if offset > segment.length:
        raise BadOffsetError(
            f"{segment.name}: offset {offset} is past the end ({segment.length})",
            segment=segment.name,
            length=segment.length,
        )
