"""A segment container: recovery, the public segment operations, and its components' wiring.

A container is built from the components passed to it (tier-1 log, tier-2 storage, config,
clocks); it builds its own metadata, durable log, read index and storage writer at start, after
recovery. Start = open tier-1 with the next epoch (fencing older instances), replay every frame
into the metadata and read index, make the storage writer reconcile tier-2, write a checkpoint,
then serve.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import cast

from segment_app.engine.api import (
    NULL_ATTRIBUTE_VALUE,
    AppendItem,
    AppendResult,
    AttributeUpdate,
    ReadResult,
    SegmentInfo,
)
from segment_app.engine.config import ContainerConfig
from segment_app.engine.containers.metadata import ContainerMetadata, SegmentMetadata
from segment_app.engine.containers.updater import LastEventNumber, Request
from segment_app.engine.errors import (
    ContainerOfflineError,
    InvalidArgumentError,
    SegmentNotFoundError,
    TooLargeError,
)
from segment_app.engine.logs.durable_log import DurableLog
from segment_app.engine.logs.frames import FrameCorruptionError, parse_frame
from segment_app.engine.logs.operations import (
    Append,
    AppendRecord,
    Delete,
    MapSegment,
    Merge,
    MetadataCheckpoint,
    Operation,
    Seal,
    Truncate,
    UpdateAttributes,
)
from segment_app.engine.reading.read_index import ReadIndex
from segment_app.engine.writer.storage_writer import StorageWriter
from tiers.base import (
    ChunkStorage,
    DataLogCorruptionError,
    DataLogError,
    DataLogFencedError,
    DurableDataLog,
    LogAddress,
)

__all__ = ["EPOCHS_PER_ASSIGNMENT", "ContainerState", "SegmentContainer", "epoch_range"]

log = logging.getLogger(__name__)

_NAME_BYTES_MAX = 1024

#: Tier-1 epochs each assignment of a container owns: its restarts on one node take the next
#: ones; the next assignment's range starts above them all.
EPOCHS_PER_ASSIGNMENT = 1 << 20


def epoch_range(assignment_epoch: int) -> tuple[int, int]:
    """The tier-1 epochs [low, high) an owner of assignment ``assignment_epoch`` may open."""
    low = assignment_epoch * EPOCHS_PER_ASSIGNMENT
    return low, low + EPOCHS_PER_ASSIGNMENT


class ContainerState(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclasses.dataclass(frozen=True, slots=True)
class ContainerParts:
    """What a container builds its parts with (the classes, or anything called the same way):
    the composition root passes the real ones; a test may pass others."""

    read_index: Callable[..., ReadIndex] = ReadIndex
    durable_log: Callable[..., DurableLog] = DurableLog
    storage_writer: Callable[..., StorageWriter] = StorageWriter


class SegmentContainer:
    def __init__(
        self,
        container_id: int,
        data_log: DurableDataLog,
        storage: ChunkStorage,
        config: ContainerConfig | None = None,
        *,
        parts: ContainerParts = ContainerParts(),
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.container_id = container_id
        self.data_log = data_log
        self.storage = storage
        self.config = config or ContainerConfig()
        self.parts = parts
        self.clock = clock
        self.monotonic = monotonic
        self.state = ContainerState.NEW
        self.metadata = ContainerMetadata(container_id)
        self.read_index = parts.read_index(self.metadata, storage, self.config.read_index)
        self.durable_log: DurableLog | None = None
        self.storage_writer: StorageWriter | None = None
        #: The cluster's assignment of this container to this node (its epoch), which bounds
        #: the tier-1 epochs this instance may open with; ``None`` on a node of its own.
        self.assignment_epoch: int | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.metadata.epoch

    async def start(self) -> None:
        self.state = ContainerState.STARTING
        try:
            epoch = await self._open_log()
            checkpoints, last_address, first_sequence = await self._recover()
            self.metadata.epoch = epoch
            self._build(checkpoints, last_address, first_sequence)
            assert self.durable_log is not None
            await self.durable_log.write_checkpoint()
        except BaseException:
            self.state = ContainerState.FAILED
            await self._stop_components()
            raise
        self.state = ContainerState.RUNNING
        log.info(
            "container %d running at epoch %d (%d segments)",
            self.container_id,
            epoch,
            len(self.metadata.by_name),
        )

    async def _open_log(self) -> int:
        """Open tier-1 with the next epoch, fencing every older instance. A container that a
        cluster assigned (``assignment_epoch``) opens at ``assignment_epoch << 20`` at least and
        never at ``(assignment_epoch + 1) << 20`` or above: an owner whose assignment a newer
        one replaced finds the log past its range and is refused (``DataLogFencedError``)
        before it could change either tier."""
        current = await self.data_log.current_epoch()
        epoch = current + 1
        if self.assignment_epoch is not None:
            low, high = epoch_range(self.assignment_epoch)
            epoch = max(epoch, low)
            if epoch >= high:
                raise DataLogFencedError(
                    f"container {self.container_id}: its log is at epoch {current}, opened by an"
                    f" owner of a newer assignment than this node's ({self.assignment_epoch})"
                )
        await self.data_log.open(epoch)
        return epoch

    async def _recover(self) -> tuple[list[tuple[int, LogAddress | None]], LogAddress | None, int]:
        checkpoints: list[tuple[int, LogAddress | None]] = []
        last_address: LogAddress | None = None
        first_sequence = -1
        async for address, frame in self.data_log.read_all():
            try:
                ops = list(
                    parse_frame(
                        frame, verify_crc=self.config.durable_log.verify_crc, copy_data=False
                    )
                )
            except FrameCorruptionError as error:
                raise DataLogCorruptionError(
                    f"container {self.container_id}: corrupt data frame at {address}: {error}"
                ) from None
            for op in ops:
                if first_sequence < 0:
                    first_sequence = op.sequence
                if isinstance(op, MetadataCheckpoint):
                    checkpoints.append((op.sequence, last_address))
                    if self.metadata.sequence < 0:
                        self._load_snapshot(op.snapshot)
                self._replay(op)
            last_address = address
        return checkpoints, last_address, max(first_sequence, 0)

    def _load_snapshot(self, snapshot: bytes) -> None:
        loaded = ContainerMetadata.from_snapshot(snapshot)
        self.metadata.epoch, self.metadata.sequence = loaded.epoch, loaded.sequence
        self.metadata.next_segment_id = loaded.next_segment_id
        self.metadata.segments, self.metadata.by_name = loaded.segments, loaded.by_name

    def _replay(self, op: Operation) -> None:
        if op.sequence <= self.metadata.sequence:
            return  # already in the snapshot
        self.metadata.apply(op, int(self.clock() * 1000))
        self._on_commit(op)

    def _build(
        self,
        checkpoints: list[tuple[int, LogAddress | None]],
        last_address: LogAddress | None,
        first_sequence: int,
    ) -> None:
        self.durable_log = self.parts.durable_log(
            self.data_log,
            self.metadata,
            self.config.durable_log,
            on_commit=self._on_commit,
            on_appends=self._on_appends,
            now_ms=lambda: int(self.clock() * 1000),
            deduplicate=self.config.deduplicate,
            over_budget=self._over_budget,
        )
        self.storage_writer = self.parts.storage_writer(
            self.metadata,
            self.read_index,
            self.storage,
            self.config.storage_writer,
            submit=self.durable_log.add,
            truncate_log=self.durable_log.truncate_before,
            now=self.monotonic,
            ensure_owner=self._ensure_owner,
        )
        self.storage_writer.recover(first_sequence)
        self.durable_log.start(checkpoints, last_address)
        self.storage_writer.start()

    async def confirm_owner(self) -> None:
        """Raise ContainerOfflineError (and go offline) if a newer instance fenced this one:
        asked before a definite "no" (no such segment) that a newer owner might not give."""
        await self._ensure_owner()

    async def _ensure_owner(self) -> None:
        """Raise ContainerOfflineError (and go offline) if a newer instance fenced this one."""
        try:
            await self.data_log.check_fenced()
        except DataLogError as error:
            if self.durable_log is not None:
                self.durable_log.fail(error)
            raise ContainerOfflineError(f"container {self.container_id}: {error}") from error

    def _over_budget(self) -> bool:
        """Unflushed data fills the cache: tier-2 is behind (hurry the storage writer)."""
        if self.read_index.cache_bytes <= self.config.read_index.cache_bytes_max:
            return False
        self.read_index.evict()
        if self.read_index.cache_bytes <= self.config.read_index.cache_bytes_max:
            return False
        if self.storage_writer is not None:
            self.storage_writer.hurry()
        return True

    def _on_commit(self, op: Operation) -> None:
        if isinstance(op, Append):
            self.read_index.append(op.segment_id, op.offset, op.data)
        elif isinstance(op, Seal | Delete):
            self.read_index.notify(op.segment_id)
        elif isinstance(op, Merge):
            self.read_index.notify(op.target_id)
            self.read_index.notify(op.source_id)
        if self.storage_writer is not None:
            self.storage_writer.on_commit(op)

    def _on_appends(self, records: list[AppendRecord]) -> None:
        self.read_index.append_records(records)
        if self.storage_writer is not None:
            self.storage_writer.on_appends(records)

    async def stop(self) -> None:
        if self.state in (ContainerState.STOPPED, ContainerState.NEW):
            self.state = ContainerState.STOPPED
            return
        self.state = ContainerState.STOPPED
        await self._stop_components()

    async def _stop_components(self) -> None:
        if self.storage_writer is not None:
            await self.storage_writer.stop()
        if self.durable_log is not None:
            await self.durable_log.stop()
        try:
            await self.data_log.close()
        except Exception:
            log.exception("closing tier-1 failed")
        self.read_index.close()

    async def flush_to_storage(self) -> None:
        """Write everything durable in tier-1 to tier-2 now."""
        self._check_running()
        assert self.storage_writer is not None
        await self.storage_writer.flush_all()

    # -- operations -------------------------------------------------------------------------------

    def _check_running(self) -> None:
        if self.state is not ContainerState.RUNNING:
            raise ContainerOfflineError(f"container {self.container_id} is {self.state.value}")
        assert self.durable_log is not None
        if self.durable_log.failure is not None:
            self.state = ContainerState.FAILED
            raise ContainerOfflineError(
                f"container {self.container_id} failed: {self.durable_log.failure!r}"
            )

    def _submit(self, op: Operation, *names: str) -> asyncio.Future[object]:
        self._check_running()
        assert self.durable_log is not None
        return self.durable_log.add(Request(op, names))

    async def create_segment(self, name: str) -> None:
        _check_name(name)
        await self._submit(MapSegment(-1, name), name)

    def append_nowait(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        writer_id: uuid.UUID | None = None,
        event_number: int | None = None,
        expected_offset: int | None = None,
    ) -> asyncio.Future[AppendResult]:
        if len(data) > self.config.append_bytes_max:
            future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
            future.set_exception(
                TooLargeError(
                    f"append of {len(data)} bytes exceeds {self.config.append_bytes_max}",
                    segment=name,
                )
            )
            return future
        op = Append(
            -1,
            data,
            writer_id=writer_id,
            event_number=event_number if event_number is not None else 0,
            expected_offset=expected_offset,
        )
        return self._submit(op, name)  # type: ignore[return-value]

    def append_group_nowait(self, items: Sequence[AppendItem]) -> asyncio.Future[object]:
        """Queue the appends as one durable log group (see ``SegmentStoreAPI``); raises
        ContainerOfflineError when the container is not running."""
        self._check_running()
        assert self.durable_log is not None
        limit = self.config.append_bytes_max
        submitted = items
        for item in items:
            if len(item.data) > limit:
                submitted = _refuse_too_large(items, limit)
                break
        future = self.durable_log.add_appends(submitted)
        future.add_done_callback(functools.partial(_forget_results, submitted))
        return future

    async def append(self, name: str, data: bytes | memoryview, **kwargs: object) -> AppendResult:
        return await self.append_nowait(name, data, **kwargs)  # type: ignore[arg-type]

    async def read(
        self, name: str, offset: int, max_length: int, *, wait_seconds: float = 0.0
    ) -> ReadResult:
        self._check_running()
        return await self.read_index.read(name, offset, max_length, wait_seconds)

    async def get_info(self, name: str) -> SegmentInfo:
        segment = self._committed(name)
        return SegmentInfo(
            name,
            True,
            segment.sealed,
            segment.deleted,
            segment.last_modified_ms,
            segment.length,
            segment.start_offset,
            segment.storage_length,
        )

    async def seal(self, name: str) -> int:
        result = await self._submit(Seal(-1), name)
        return cast(int, result)

    async def truncate(self, name: str, offset: int) -> None:
        await self._submit(Truncate(-1, offset), name)

    async def delete(self, name: str) -> None:
        await self._submit(Delete(-1), name)

    async def merge(self, target: str, source: str) -> int:
        """Seal ``source`` and merge it into ``target``. Both operations are queued at once:
        the merge is checked against the seal in flight (``MetadataUpdater``), so they go to
        tier-1 in one frame, one sync, instead of one after the other; if the seal fails, so
        does the merge (the seal's error is the answer)."""
        sealed = self._submit(Seal(-1), source)
        merged = self._submit(Merge(-1, -1), target, source)
        outcomes = await asyncio.gather(sealed, merged, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return cast(int, outcomes[1])

    async def get_attributes(self, name: str, ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
        segment = self._committed(name)
        return {i: segment.attributes.get(i, NULL_ATTRIBUTE_VALUE) for i in ids}

    async def update_attributes(self, name: str, updates: list[AttributeUpdate]) -> None:
        values = {u.attribute_id: u.value for u in updates}
        expected = {u.attribute_id: u.expected for u in updates if u.expected is not None}
        await self._submit(UpdateAttributes(-1, values, expected), name)

    async def last_event_number(self, name: str, writer_id: uuid.UUID) -> int:
        """``writer_id``'s last event number on ``name`` once every operation accepted before
        this call is durable (``LastEventNumber``): what a writer that reconnects must resend
        after, so that an append still in flight on its lost connection is neither resent
        (a duplicate) nor counted before it is durable."""
        return cast(int, await self._submit(LastEventNumber(writer_id), name))

    def _committed(self, name: str) -> SegmentMetadata:
        self._check_running()
        segment = self.metadata.get(name)
        if segment is None:
            raise SegmentNotFoundError(f"segment {name} does not exist", segment=name)
        return segment


def _refuse_too_large(items: Sequence[AppendItem], limit: int) -> list[AppendItem]:
    """Fail the appends over ``limit`` bytes, and every later one of the same writer and
    segment (its data must not have a gap); return the others."""
    refused: dict[tuple[str, uuid.UUID | None], BaseException] = {}
    submitted: list[AppendItem] = []
    for item in items:
        error = refused.get((item.segment, item.writer_id))
        if error is None and len(item.data) > limit:
            error = refused[(item.segment, item.writer_id)] = TooLargeError(
                f"append of {len(item.data)} bytes exceeds {limit}", segment=item.segment
            )
        if error is not None:
            item.error = error
        else:
            submitted.append(item)
    return submitted


def _forget_results(items: Sequence[AppendItem], future: asyncio.Future[object]) -> None:
    """A failed group's outcomes cannot be trusted: the caller fails every item (the log
    filled in ``result`` when it accepted each, before it was durable)."""
    if future.cancelled() or future.exception() is not None:
        for item in items:
            item.result = None


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "\x00" in name:
        raise InvalidArgumentError(f"invalid segment name {name!r}", segment=str(name))
    if len(name.encode()) > _NAME_BYTES_MAX:
        raise InvalidArgumentError(
            f"segment name longer than {_NAME_BYTES_MAX} bytes", segment=name[:64]
        )
