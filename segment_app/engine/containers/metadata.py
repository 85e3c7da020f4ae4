"""Container and segment metadata, and the one function that applies an operation to them.

``ContainerMetadata.apply`` is used both when a frame becomes durable and during recovery, so
the state after a restart is computed exactly as it was before. Snapshots (for checkpoints) use a
versioned byte format. Invariants: ``start_offset <= length``, ``storage_length <= length``,
lengths never decrease, sequence numbers strictly increase.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable
from typing import Any

from segment_app.engine.errors import InvariantError
from segment_app.engine.invariants import check
from segment_app.engine.logs.operations import (
    Append,
    AppendRecord,
    ChunkRecord,
    Delete,
    MapSegment,
    Merge,
    MetadataCheckpoint,
    Operation,
    OperationFormatError,
    Reader,
    Seal,
    Truncate,
    UpdateAttributes,
    UpdateStorage,
    encode_chunk,
)

__all__ = ["ContainerMetadata", "PendingMerge", "SegmentMetadata"]

_SNAPSHOT_VERSION = 1
_SNAP_HEADER = struct.Struct(">BIqqQI")  # version, container id, epoch, sequence, next id, count
_SEG = struct.Struct(">QQQQQqB")  # id, start, length, storage length, last modified, merged, flags
_MERGE = struct.Struct(">QQQ")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_ATTR = struct.Struct(">16sq")


@dataclasses.dataclass(frozen=True, slots=True)
class PendingMerge:
    """A merge committed in tier-1 whose source is not yet relinked into the target in tier-2."""

    offset: int
    source_id: int
    length: int


@dataclasses.dataclass(slots=True)
class SegmentMetadata:
    segment_id: int
    name: str
    start_offset: int = 0
    length: int = 0
    storage_length: int = 0
    last_modified_ms: int = 0
    sealed: bool = False
    sealed_in_storage: bool = False
    deleted: bool = False
    #: For a merged source: the target it went into (its data now belongs to the target).
    merged_into: int = -1
    attributes: dict[uuid.UUID, int] = dataclasses.field(default_factory=dict)
    chunks: list[ChunkRecord] = dataclasses.field(default_factory=list)
    pending_merges: list[PendingMerge] = dataclasses.field(default_factory=list)
    #: Sequence of the last operation that changed what tier-2 must hold (not serialized).
    last_storage_op: int = -1

    @property
    def merged(self) -> bool:
        return self.merged_into >= 0

    def check_invariants(self) -> None:
        check(0 <= self.start_offset <= self.length, f"{self.name}: start_offset > length")
        check(0 <= self.storage_length <= self.length, f"{self.name}: storage_length > length")
        end = self.chunks[0].start if self.chunks else 0
        for chunk in self.chunks:
            check(chunk.start == end, f"{self.name}: chunk {chunk.name} leaves a gap")
            end = chunk.end
        if self.chunks:
            check(end == self.storage_length, f"{self.name}: chunks end at {end}")


class ContainerMetadata:
    """All metadata of one container: its epoch, operation sequence and segments."""

    def __init__(self, container_id: int) -> None:
        self.container_id = container_id
        self.epoch = 0
        self.sequence = -1
        self.next_segment_id = 1
        self.segments: dict[int, SegmentMetadata] = {}
        self.by_name: dict[str, int] = {}

    # -- lookups --------------------------------------------------------------------------------

    def get(self, name: str) -> SegmentMetadata | None:
        segment_id = self.by_name.get(name)
        return None if segment_id is None else self.segments[segment_id]

    # -- applying operations --------------------------------------------------------------------

    def apply(self, op: Operation, now_ms: int = 0) -> None:
        """Apply a durable operation. Raises InvariantError if it does not fit the state."""
        if type(op) is Append:
            record = (op.sequence, op.segment_id, op.offset, op.data, op.writer_id, op.event_number)
            self.apply_appends([record], now_ms)
            return
        check(op.sequence > self.sequence, "sequence %d after %d", op.sequence, self.sequence)
        self.sequence = op.sequence
        handler = _APPLY.get(type(op))
        if handler is None:
            raise InvariantError(f"no handler for {type(op).__name__}")
        handler(self, op, now_ms)

    def _segment(self, segment_id: int) -> SegmentMetadata:
        segment = self.segments.get(segment_id)
        check(segment is not None, "operation on unknown segment id %d", segment_id)
        assert segment is not None
        return segment

    def _apply_map(self, op: MapSegment, now_ms: int) -> None:
        check(op.name not in self.by_name, f"segment {op.name} mapped twice")
        self.segments[op.segment_id] = SegmentMetadata(
            op.segment_id, op.name, last_modified_ms=now_ms
        )
        self.by_name[op.name] = op.segment_id
        self.next_segment_id = max(self.next_segment_id, op.segment_id + 1)

    def apply_appends(self, records: list[AppendRecord], now_ms: int = 0) -> None:
        """Apply durable appends, in order (what ``apply`` does for each as an ``Append``, in
        one loop: the durable log commits many per frame)."""
        segments = self.segments
        sequence = self.sequence
        for record in records:
            op_sequence, segment_id, offset, data, writer_id, event_number = record
            segment = segments.get(segment_id)
            if op_sequence <= sequence or segment is None:
                check(op_sequence > sequence, "sequence %d after %d", op_sequence, sequence)
                check(False, "operation on unknown segment id %d", segment_id)
            assert segment is not None
            if offset != segment.length or segment.sealed:
                check(
                    offset == segment.length,
                    "%s: append at %d != length %d",
                    segment.name,
                    offset,
                    segment.length,
                )
                check(False, "%s: append to a sealed segment", segment.name)
            sequence = op_sequence
            segment.length = offset + len(data)
            segment.last_modified_ms = now_ms
            segment.last_storage_op = op_sequence
            if writer_id is not None:
                segment.attributes[writer_id] = event_number
            self.sequence = sequence

    def _apply_seal(self, op: Seal, _now: int) -> None:
        segment = self._segment(op.segment_id)
        segment.sealed = True
        segment.last_storage_op = op.sequence

    def _apply_truncate(self, op: Truncate, _now: int) -> None:
        segment = self._segment(op.segment_id)
        check(op.offset <= segment.length, f"{segment.name}: truncate past the end")
        segment.start_offset = max(segment.start_offset, op.offset)
        segment.last_storage_op = op.sequence

    def _apply_merge(self, op: Merge, now_ms: int) -> None:
        target = self._segment(op.target_id)
        source = self._segment(op.source_id)
        check(op.target_offset == target.length, f"{target.name}: merge at wrong offset")
        check(source.sealed and source.length == op.length, f"{source.name}: bad merge source")
        target.pending_merges.append(PendingMerge(op.target_offset, op.source_id, op.length))
        target.length += op.length
        target.last_modified_ms = now_ms
        target.last_storage_op = op.sequence
        source.merged_into = op.target_id
        source.last_storage_op = op.sequence
        del self.by_name[source.name]

    def _apply_attributes(self, op: UpdateAttributes, _now: int) -> None:
        self._segment(op.segment_id).attributes.update(op.attributes)

    def _apply_delete(self, op: Delete, _now: int) -> None:
        segment = self._segment(op.segment_id)
        segment.deleted = True
        segment.last_storage_op = op.sequence
        self.by_name.pop(segment.name, None)

    def _apply_checkpoint(self, op: MetadataCheckpoint, _now: int) -> None:
        """A checkpoint changes nothing: it records the state the operations built."""

    def _apply_storage(self, op: UpdateStorage, _now: int) -> None:
        segment = self._segment(op.segment_id)
        if op.deleted_in_storage:
            del self.segments[op.segment_id]
            return
        check(op.storage_length >= segment.storage_length, f"{segment.name}: storage shrank")
        segment.chunks = segment.chunks[op.drop_head : op.keep] + op.chunks
        segment.storage_length = op.storage_length
        segment.sealed_in_storage = segment.sealed_in_storage or op.sealed_in_storage
        if op.merged_source_id >= 0:
            self.segments.pop(op.merged_source_id, None)
            segment.pending_merges = [
                m for m in segment.pending_merges if m.source_id != op.merged_source_id
            ]
        segment.check_invariants()

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        parts = [
            _SNAP_HEADER.pack(
                _SNAPSHOT_VERSION,
                self.container_id,
                self.epoch,
                self.sequence,
                self.next_segment_id,
                len(self.segments),
            )
        ]
        for segment in self.segments.values():
            parts.append(_encode_segment(segment))
        return b"".join(parts)

    @classmethod
    def from_snapshot(cls, data: bytes) -> ContainerMetadata:
        r = Reader(data)
        version, container_id, epoch, sequence, next_id, count = r.unpack(_SNAP_HEADER)
        if version != _SNAPSHOT_VERSION:
            raise OperationFormatError(f"unknown metadata snapshot version {version}")
        metadata = cls(container_id)
        metadata.epoch, metadata.sequence, metadata.next_segment_id = epoch, sequence, next_id
        for _ in range(count):
            segment = _decode_segment(r)
            metadata.segments[segment.segment_id] = segment
            if not segment.deleted and not segment.merged:
                metadata.by_name[segment.name] = segment.segment_id
        return metadata


_APPLY: dict[type[Operation], Callable[[ContainerMetadata, Any, int], None]] = {
    MapSegment: ContainerMetadata._apply_map,
    Seal: ContainerMetadata._apply_seal,
    Truncate: ContainerMetadata._apply_truncate,
    Merge: ContainerMetadata._apply_merge,
    UpdateAttributes: ContainerMetadata._apply_attributes,
    Delete: ContainerMetadata._apply_delete,
    MetadataCheckpoint: ContainerMetadata._apply_checkpoint,
    UpdateStorage: ContainerMetadata._apply_storage,
}


def _encode_segment(s: SegmentMetadata) -> bytes:
    flags = int(s.sealed) | int(s.sealed_in_storage) << 1 | int(s.deleted) << 2
    name = s.name.encode()
    parts = [
        _SEG.pack(
            s.segment_id,
            s.start_offset,
            s.length,
            s.storage_length,
            s.last_modified_ms,
            s.merged_into,
            flags,
        ),
        _U16.pack(len(name)),
        name,
        _U32.pack(len(s.attributes)),
        *(_ATTR.pack(k.bytes, v) for k, v in s.attributes.items()),
        _U32.pack(len(s.chunks)),
        *(encode_chunk(c) for c in s.chunks),
        _U32.pack(len(s.pending_merges)),
        *(_MERGE.pack(m.offset, m.source_id, m.length) for m in s.pending_merges),
    ]
    return b"".join(parts)


def _decode_segment(r: Reader) -> SegmentMetadata:
    segment_id, start, length, storage, modified, merged, flags = r.unpack(_SEG)
    segment = SegmentMetadata(
        segment_id,
        r.string(),
        start,
        length,
        storage,
        modified,
        bool(flags & 1),
        bool(flags & 2),
        bool(flags & 4),
        merged,
    )
    segment.attributes = r.attrs()
    (chunks,) = r.unpack(_U32)
    segment.chunks = [r.chunk() for _ in range(chunks)]
    (merges,) = r.unpack(_U32)
    segment.pending_merges = [PendingMerge(*r.unpack(_MERGE)) for _ in range(merges)]
    return segment
