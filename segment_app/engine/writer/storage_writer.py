"""The storage writer: moves durable data and changes from tier-1 into tier-2.

It is driven by state, not by replaying operations: each committed operation that affects
tier-2 marks its segment dirty (with the sequence number of the first such operation not yet
applied), and the writer brings each dirty segment's tier-2 image in line with its metadata:
flush appended bytes in large writes (when enough bytes or old enough), relink merged sources'
chunks into their target, seal, drop chunks below the start offset, delete. Every tier-2 layout
change is recorded by an ``UpdateStorage`` operation through the durable log, so it is fenced
with tier-1 and recovered with the metadata. Chunks are only ever appended to by the epoch that
created them, so a fenced older instance cannot overwrite what a newer one stored. Once segments
are clean, tier-1 may be truncated up to the newest checkpoint below the lowest unapplied
operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from millrace.kernel.naming import TRANSACTION_MARK
from segment_app.engine.config import StorageWriterConfig
from segment_app.engine.containers.metadata import ContainerMetadata, SegmentMetadata
from segment_app.engine.containers.updater import Request
from segment_app.engine.errors import ContainerOfflineError
from segment_app.engine.logs.operations import (
    AppendRecord,
    ChunkRecord,
    Merge,
    Operation,
    UpdateStorage,
)
from segment_app.engine.reading.read_index import ReadIndex
from tiers.base import (
    BadChunkOffsetError,
    ChunkExistsError,
    ChunkNotFoundError,
    ChunkStorage,
    ChunkWrite,
)

__all__ = ["StorageWriter"]

log = logging.getLogger(__name__)

Submit = Callable[[Request], Awaitable[object]]

#: A pass that has run this long (seconds) is reported as tier-2 trouble.
STALL_REPORT_S = 10.0


class StorageWriter:
    def __init__(
        self,
        metadata: ContainerMetadata,
        read_index: ReadIndex,
        storage: ChunkStorage,
        config: StorageWriterConfig,
        *,
        submit: Submit,
        truncate_log: Callable[[int], Awaitable[bool]],
        now: Callable[[], float],
        ensure_owner: Callable[[], Awaitable[None]],
    ) -> None:
        self.metadata = metadata
        self.read_index = read_index
        self.storage = storage
        self.config = config
        self.submit = submit
        self.truncate_log = truncate_log
        self.ensure_owner = ensure_owner
        self.now = now
        #: segment id -> sequence of the first operation not yet applied to tier-2.
        self.dirty: dict[int, int] = {}
        self._dirty_since: dict[int, float] = {}
        self._urgent: set[int] = set()
        self._task: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()
        self._pass_lock = asyncio.Lock()
        self._stopped = False  # one pass at a time (the loop, or flush_all)
        self.bytes_flushed = 0
        #: The last failed pass's error (``Type: message``), cleared by the next pass that works:
        #: what a health check shows of a tier-2 in trouble.
        self.last_error: str | None = None
        #: When the pass under way began (``now``), while one is.
        self._pass_started: float | None = None

    # -- feeding ----------------------------------------------------------------------------------

    def on_commit(self, op: Operation) -> None:
        if not op.STORAGE_RELEVANT:
            return
        if isinstance(op, Merge):
            self._mark(op.target_id, op.sequence, urgent=True)
            self._mark(op.source_id, op.sequence, urgent=True)
            return
        segment_id: int = op.segment_id  # type: ignore[attr-defined]
        urgent = type(op).__name__ != "Append"
        if not urgent:  # an append makes its segment due once enough bytes wait
            segment = self.metadata.segments.get(segment_id)
            unflushed = segment.length - segment.storage_length if segment is not None else 0
            urgent = unflushed >= self.config.flush_bytes_min
        self._mark(segment_id, op.sequence, urgent)

    def on_appends(self, records: list[AppendRecord]) -> None:
        """``on_commit`` for each durable append of a frame (in operation order)."""
        dirty, since, segments = self.dirty, self._dirty_since, self.metadata.segments
        flush_min = self.config.flush_bytes_min
        now: float | None = None
        for record in records:
            sequence, segment_id = record[0], record[1]
            if segment_id not in dirty:
                dirty[segment_id] = sequence
                since[segment_id] = now = self.now() if now is None else now
            segment = segments.get(segment_id)
            if segment is not None and segment.length - segment.storage_length >= flush_min:
                self._urgent.add(segment_id)
                self._wakeup.set()

    def _mark(self, segment_id: int, sequence: int, urgent: bool) -> None:
        if segment_id not in self.dirty:
            self.dirty[segment_id] = sequence
            self._dirty_since[segment_id] = self.now()
        if urgent:
            self._urgent.add(segment_id)
            self._wakeup.set()

    def hurry(self) -> None:
        """Flush every dirty segment now, whatever its age (the cache is full)."""
        self._urgent.update(self.dirty)
        self._wakeup.set()

    def recover(self, first_sequence: int) -> None:
        """After recovery: every segment whose tier-2 image lags its metadata is dirty."""
        for segment in self.metadata.segments.values():
            if _needs_work(segment):
                self._mark(segment.segment_id, first_sequence, urgent=True)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="storage-writer")

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def flush_all(self) -> None:
        """Apply everything pending now, whatever its age (tests, shutdown, benchmarks)."""
        while self.dirty:
            self._urgent.update(self.dirty)
            await self._pass()

    # -- the loop ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopped:
            try:
                worked = await self._pass()
            except ContainerOfflineError:
                return
            except Exception as exc:
                log.exception("storage writer pass failed; retrying")
                self.last_error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(self.config.retry_delay_ms / 1000)
                continue
            self.last_error = None
            await asyncio.sleep(0)  # never starve the event loop, whatever the backends do
            if not worked:
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.config.idle_delay_ms / 1000):
                        await self._wakeup.wait()

    async def _pass(self) -> bool:
        async with self._pass_lock:
            self._pass_started = self.now()
            try:
                return await self._pass_locked()
            finally:
                self._pass_started = None

    def trouble(self) -> str | None:
        """What a health check should say of tier-2: the last failed pass's error, or that
        the pass under way has waited ``STALL_REPORT_S`` or more (a tier-2 that hangs fails
        nothing for a long time); None when it is well."""
        if self.last_error is not None:
            return self.last_error
        started = self._pass_started
        if started is not None and self.now() - started >= STALL_REPORT_S:
            return f"no answer from tier-2 for {self.now() - started:.0f} s"
        return None

    async def _pass_locked(self) -> bool:
        due = self._due_now()
        worked = bool(due)
        plain = [segment_id for segment_id in due if self._plain_append(segment_id)]
        batch_max = self.config.flush_batch_max
        for start in range(0, len(plain), batch_max):
            await self._flush_batch(plain[start : start + batch_max])
        done = set(plain)
        for segment_id in due:
            if segment_id not in done:
                await self._process(segment_id)
        lowest = min(self.dirty.values(), default=self.metadata.sequence + 1)
        if await self.truncate_log(lowest):
            worked = True
        return worked

    def _due_now(self) -> list[int]:
        """The dirty segments to work on now: the urgent ones (changes other than appends,
        ``flush_bytes_min`` unflushed bytes, a hurry), then those dirty for ``flush_delay_ms``.
        ``_dirty_since`` is kept in time order, so only the due ones are looked at, however
        many segments are dirty."""
        urgent = self._urgent
        due = [segment_id for segment_id in urgent if segment_id in self.dirty]
        oldest_allowed = self.now() - self.config.flush_delay_ms / 1000
        for segment_id, since in self._dirty_since.items():
            if since > oldest_allowed:
                break
            if segment_id not in urgent:
                due.append(segment_id)
        return due

    def _plain_append(self, segment_id: int) -> bool:
        """Only appended bytes to flush, in one write, and nothing else to do: such segments
        are flushed many at a time (``_flush_batch``)."""
        segment = self.metadata.segments.get(segment_id)
        return (
            segment is not None
            and not (segment.deleted or segment.merged or segment.sealed)
            and not segment.pending_merges
            and 0 < segment.length - segment.storage_length <= self.config.write_bytes_max
            and not (segment.chunks and segment.chunks[0].end <= segment.start_offset)
        )

    async def _flush_batch(self, segment_ids: list[int]) -> None:
        """Flush the appended bytes of several segments with one tier-2 ``write_many`` (one
        sync for all, where the backend can) and record the new layouts with concurrent
        ``UpdateStorage`` operations (one group commit in tier-1). A segment whose write failed
        goes the one-by-one way, which knows how to recover a chunk that is not as recorded."""
        await self.ensure_owner()  # a fenced instance must not touch tier-2 any more
        plans: list[tuple[SegmentMetadata, int, int, ChunkRecord | None]] = []
        writes: list[ChunkWrite] = []
        seen: dict[int, int] = {}
        for segment_id in segment_ids:
            segment = self.metadata.segments.get(segment_id)  # (reads below may wait)
            if segment is None or not self._plain_append(segment_id):
                continue  # changed meanwhile: the next pass sees to it
            seen[segment_id] = segment.last_storage_op
            offset, length = segment.storage_length, segment.length - segment.storage_length
            data = await self.read_index.read_unflushed(segment, offset, length)
            last = self._appendable_chunk(segment, offset, length)
            if last is not None:
                writes.append(ChunkWrite(last.name, last.length, data))
            else:
                writes.append(ChunkWrite(self._new_chunk_name(segment, offset), 0, data, True))
            plans.append((segment, offset, length, last))
        outcomes = await self.storage.write_many(writes)
        records = []
        retry: list[int] = []
        for (segment, offset, length, last), write, error in zip(
            plans, writes, outcomes, strict=True
        ):
            if error is not None:
                retry.append(segment.segment_id)
                continue
            records.append(self._record_write(segment, offset, length, last, write.name))
        await asyncio.gather(*records)
        for segment_id, last_op in seen.items():
            if segment_id not in retry:
                self._settle(segment_id, last_op)
        for segment_id in retry:
            await self._process(segment_id)

    def _appendable_chunk(
        self, segment: SegmentMetadata, offset: int, length: int
    ) -> ChunkRecord | None:
        """The segment's last chunk if this instance may append ``length`` bytes at ``offset``
        to it (made by this epoch, ends there, stays under the chunk size limit)."""
        last = segment.chunks[-1] if segment.chunks else None
        if (
            self.storage.supports_append
            and last is not None
            and last.epoch == self.metadata.epoch
            and last.end == offset
            and last.length + length <= self.config.chunk_bytes_max
        ):
            return last
        return None

    def _settle(self, segment_id: int, seen: int) -> None:
        """After work on a segment: clean if nothing changed meanwhile, else dirty again (not
        urgent, its age restarts)."""
        current = self.metadata.segments.get(segment_id)
        if current is None or (current.last_storage_op == seen and not _needs_work(current)):
            self._clean(segment_id)
        else:
            self._urgent.discard(segment_id)
            self._dirty_since.pop(segment_id, None)  # to the end: the order stays by time
            self._dirty_since[segment_id] = self.now()

    async def _process(self, segment_id: int) -> None:
        segment = self.metadata.segments.get(segment_id)
        if segment is None:
            self._clean(segment_id)
            return
        seen = segment.last_storage_op
        if segment.deleted:
            await self._delete(segment)
        else:
            await self._flush(segment)
            if segment.merged:
                self._clean(segment_id)  # its target relinks it
                return
            await self._seal(segment)
            await self._drop_truncated(segment)
        self._settle(segment_id, seen)

    def _clean(self, segment_id: int) -> None:
        self.dirty.pop(segment_id, None)
        self._dirty_since.pop(segment_id, None)
        self._urgent.discard(segment_id)

    # -- flushing ---------------------------------------------------------------------------------

    async def _flush(self, segment: SegmentMetadata) -> None:
        while segment.storage_length < segment.length and not segment.deleted:
            offset = segment.storage_length
            merge = next((m for m in segment.pending_merges if m.offset == offset), None)
            if merge is not None:
                await self._relink(segment, merge.source_id)
                continue
            end = min(
                [m.offset for m in segment.pending_merges if m.offset > offset] + [segment.length]
            )
            if (
                not self.storage.supports_append
                and self.storage.write_many_concurrency > 1
                and end - offset > self.config.write_bytes_max
            ):
                await self._write_side_by_side(segment, offset, end)
                continue
            await self._write(
                segment, offset, min(end, offset + self.config.write_bytes_max) - offset
            )

    async def _write_side_by_side(self, segment: SegmentMetadata, offset: int, end: int) -> None:
        """Several new chunks of one segment at once, recorded in order: on a tier-2 without
        appends every flush is a chunk of its own anyway, and one put at a time would make a
        segment's flush rate one put's latency. Up to the first that failed they are recorded;
        that one goes the one-by-one way, which knows how to recover a chunk that is not as
        recorded (the later ones, made meanwhile, are made again the same way)."""
        await self.ensure_owner()  # a fenced instance must not touch tier-2 any more
        step = self.config.write_bytes_max
        count = min(self.storage.write_many_concurrency, -(-(end - offset) // step))
        writes: list[ChunkWrite] = []
        chunks: list[ChunkRecord] = []
        position = offset
        for _ in range(count):
            length = min(step, end - position)
            data = await self.read_index.read_unflushed(segment, position, length)
            name = self._new_chunk_name(segment, position)
            writes.append(ChunkWrite(name, 0, data, True))
            chunks.append(ChunkRecord(name, position, length, self.metadata.epoch))
            position += length
        outcomes = await self.storage.write_many(writes)
        recorded: list[ChunkRecord] = []
        for chunk, error in zip(chunks, outcomes, strict=True):
            if error is not None:
                break
            recorded.append(chunk)
        if not recorded:
            await self._write(segment, offset, chunks[0].length)
            return
        await self._record(segment, recorded[-1].end, keep=len(segment.chunks), chunks=recorded)
        self.bytes_flushed += recorded[-1].end - offset

    async def _write(self, segment: SegmentMetadata, offset: int, length: int) -> None:
        await self.ensure_owner()  # a fenced instance must not touch tier-2 any more
        data = await self.read_index.read_unflushed(segment, offset, length)
        last = self._appendable_chunk(segment, offset, length)
        if last is not None:
            try:
                await self.storage.write(last.name, last.length, data)
            except (BadChunkOffsetError, ChunkNotFoundError):
                last = None  # the chunk is not as recorded: start a new one
            else:
                await self._record_write(segment, offset, length, last, last.name)
                return
        name = self._new_chunk_name(segment, offset)
        try:
            await self.storage.create_with_data(name, data)
        except ChunkExistsError:  # left by an earlier failed attempt of this epoch
            await self.storage.delete(name)
            await self.storage.create_with_data(name, data)
        await self._record_write(segment, offset, length, None, name)

    def _new_chunk_name(self, segment: SegmentMetadata, offset: int) -> str:
        return f"{segment.name}.E{self.metadata.epoch}.O{offset}"

    async def _record_write(
        self,
        segment: SegmentMetadata,
        offset: int,
        length: int,
        appended_to: ChunkRecord | None,
        name: str,
    ) -> None:
        """Record ``length`` bytes written at ``offset``: appended to the segment's last chunk
        ``appended_to``, or in a new chunk ``name``."""
        if appended_to is not None:
            chunk = dataclasses.replace(appended_to, length=appended_to.length + length)
            keep = len(segment.chunks) - 1
        else:
            chunk = ChunkRecord(name, offset, length, self.metadata.epoch)
            keep = len(segment.chunks)
        await self._record(segment, offset + length, keep=keep, chunks=[chunk])
        self.bytes_flushed += length

    async def _relink(self, target: SegmentMetadata, source_id: int) -> None:
        source = self.metadata.segments[source_id]
        await self._flush(source)
        shift = target.storage_length  # a merge source is never truncated: it starts at 0
        moved = [ChunkRecord(c.name, c.start + shift, c.length, c.epoch) for c in source.chunks]
        await self._record(
            target,
            target.storage_length + source.length,
            keep=len(target.chunks),
            chunks=moved,
            merged_source_id=source_id,
        )
        self.read_index.remove(source_id)
        self._clean(source_id)

    async def _seal(self, segment: SegmentMetadata) -> None:
        flushed = segment.storage_length == segment.length
        if segment.sealed and not segment.sealed_in_storage and flushed:
            await self._record(
                segment, segment.storage_length, keep=len(segment.chunks), sealed=True
            )

    async def _drop_truncated(self, segment: SegmentMetadata) -> None:
        drop = 0
        for chunk in segment.chunks:
            if chunk.end > segment.start_offset:
                break
            drop += 1
        if drop == 0:
            return
        doomed = segment.chunks[:drop]
        await self._record(
            segment, segment.storage_length, drop_head=drop, keep=len(segment.chunks)
        )
        for chunk in doomed:
            await self._delete_chunk(chunk.name)

    async def _delete(self, segment: SegmentMetadata) -> None:
        for merge in list(segment.pending_merges):
            source = self.metadata.segments.get(merge.source_id)
            if source is not None:
                await self._delete(source)
        for chunk in segment.chunks:
            await self._delete_chunk(chunk.name)
        op = UpdateStorage(segment.segment_id, segment.storage_length, deleted_in_storage=True)
        await self.submit(Request(op, internal=True))
        self.read_index.remove(segment.segment_id)

    async def _delete_chunk(self, name: str) -> None:
        await self.ensure_owner()
        with contextlib.suppress(ChunkNotFoundError):
            await self.storage.delete(name)

    async def _record(
        self,
        segment: SegmentMetadata,
        storage_length: int,
        *,
        keep: int,
        drop_head: int = 0,
        chunks: list[ChunkRecord] | None = None,
        merged_source_id: int = -1,
        sealed: bool = False,
    ) -> None:
        op = UpdateStorage(
            segment.segment_id,
            storage_length,
            drop_head,
            keep,
            chunks or [],
            merged_source_id,
            sealed,
        )
        await self.submit(Request(op, internal=True))
        if TRANSACTION_MARK in segment.name:  # no reader reads it: its memory serves again
            self.read_index.release_stored(segment.segment_id)
        self.read_index.evict()


def _needs_work(segment: SegmentMetadata) -> bool:
    if segment.deleted or segment.storage_length < segment.length:
        return True
    if segment.sealed and not segment.sealed_in_storage and not segment.merged:
        return True
    return bool(segment.chunks) and segment.chunks[0].end <= segment.start_offset
