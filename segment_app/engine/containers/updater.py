"""Validates operations before they are written, against metadata plus everything in flight.

The durable log accepts operations faster than tier-1 makes them durable, so each new operation
must be checked against the committed metadata *and* the effects of operations accepted but not
yet durable. ``MetadataUpdater`` keeps that pending view as a small overlay, assigns offsets and
segment ids, and answers what the caller will be told once the operation is durable. When a frame
fails the overlay is dropped (rollback); when nothing is in flight it equals the metadata and is
cleared.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from segment_app.engine.api import NULL_ATTRIBUTE_VALUE, AppendResult
from segment_app.engine.containers.metadata import ContainerMetadata, SegmentMetadata
from segment_app.engine.errors import (
    BadAttributeUpdateError,
    BadOffsetError,
    EngineError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
)
from segment_app.engine.logs.operations import (
    Append,
    Delete,
    MapSegment,
    Merge,
    MetadataCheckpoint,
    Operation,
    Seal,
    Truncate,
    UpdateAttributes,
    UpdateStorage,
)

__all__ = ["NO_WRITE", "MetadataUpdater", "Request"]


class _NoWrite:
    """Marker: the request needs no log record (idempotent no-op); answer after what precedes."""


NO_WRITE = _NoWrite()


@dataclasses.dataclass(slots=True)
class LastEventNumber(Operation):
    """A question, not a log operation (never written): an idempotent writer's last event
    number on a segment, as it will be once every operation accepted before it is durable.

    It goes through the durable log queue like an operation, so it is answered after every
    append queued before it (a reconnecting writer's appends still on their way to tier-1
    count, once they are there), and fails with them if tier-1 fails."""

    writer_id: uuid.UUID


@dataclasses.dataclass(slots=True)
class _Pending:
    segment_id: int
    name: str
    length: int
    start_offset: int
    sealed: bool
    gone: bool
    #: Attributes changed by operations in flight, by ``UUID.int`` (hashed in C, where a UUID
    #: is hashed by Python code); ``committed`` holds the rest, by UUID (not copied).
    attributes: dict[int, int]
    committed: dict[uuid.UUID, int]

    def attribute(self, key: uuid.UUID) -> int:
        value = self.attributes.get(key.int)
        if value is None:
            return self.committed.get(key, NULL_ATTRIBUTE_VALUE)
        return value


@dataclasses.dataclass(slots=True)
class Request:
    """An operation waiting in the durable log queue, addressed by segment name(s)."""

    op: Operation
    names: tuple[str, ...] = ()
    #: The container's own bookkeeping (storage writer): never held back by throttling.
    internal: bool = False
    #: What the caller gets when the operation is durable (set by ``accept``).
    result: object = None


class MetadataUpdater:
    def __init__(self, metadata: ContainerMetadata, *, deduplicate: bool = True) -> None:
        self.metadata = metadata
        self.deduplicate = deduplicate
        self._segments: dict[int, _Pending] = {}
        self._names: dict[str, int | None] = {}
        #: Segments appended to by name (``_resolve`` is several lookups); entries become
        #: ``gone`` when their segment is deleted or merged, and are dropped on remapping.
        self._by_name: dict[str, _Pending] = {}
        self._next_id: int | None = None

    def clear(self) -> None:
        """Forget the overlay (nothing in flight any more, or a rollback)."""
        self._segments.clear()
        self._names.clear()
        self._by_name.clear()
        self._next_id = None

    # -- lookups ----------------------------------------------------------------------------------

    def _resolve(self, name: str) -> _Pending:
        segment_id = self._names[name] if name in self._names else self.metadata.by_name.get(name)
        pending = None if segment_id is None else self._pending(segment_id)
        if pending is None or pending.gone:
            raise SegmentNotFoundError(f"segment {name} does not exist", segment=name)
        return pending

    def _pending(self, segment_id: int) -> _Pending | None:
        pending = self._segments.get(segment_id)
        if pending is None:
            committed = self.metadata.segments.get(segment_id)
            if committed is None:
                return None
            pending = self._segments[segment_id] = _from_committed(committed)
        return pending

    # -- accepting --------------------------------------------------------------------------------

    def accept(self, request: Request) -> object:
        """Validate ``request`` and update the overlay; return NO_WRITE if nothing must be
        written. Raises an EngineError the caller should get."""
        op = request.op
        if isinstance(op, Append):
            return self._accept_append(op, request)
        handler = _ACCEPT.get(type(op))
        if handler is None:
            raise EngineError(f"cannot accept {type(op).__name__}")
        return handler(self, op, request)

    def _accept_append(self, op: Append, request: Request) -> object:
        result, segment_id, offset = self.admit_append(
            request.names[0], len(op.data), op.writer_id, op.event_number, op.expected_offset
        )
        request.result = result
        if offset < 0:
            return NO_WRITE
        op.segment_id = segment_id
        op.offset = offset
        return op

    def admit_append(
        self,
        name: str,
        size: int,
        writer_id: uuid.UUID | None,
        event_number: int,
        expected_offset: int | None,
    ) -> tuple[AppendResult, int, int]:
        """Validate an append of ``size`` bytes to segment ``name`` and add it to the overlay.

        Returns what the caller will be told, the segment id and the offset to write at; the
        offset is -1 for a duplicate of an idempotent writer (nothing to write). Raises the
        EngineError the caller should get."""
        segment = self._by_name.get(name)
        if segment is None or segment.gone:
            segment = self._by_name[name] = self._resolve(name)
        length = segment.length
        if segment.sealed:
            raise SegmentSealedError(
                f"segment {name} is sealed", segment=segment.name, length=length
            )
        if expected_offset is not None and expected_offset != length:
            raise BadOffsetError(
                f"{name}: expected offset {expected_offset}, length {length}",
                segment=name,
                length=length,
            )
        previous = NULL_ATTRIBUTE_VALUE
        if writer_id is not None:
            attributes, key = segment.attributes, writer_id.int
            value = attributes.get(key)
            previous = value if value is not None else segment.committed.get(writer_id, previous)
            if event_number <= previous and self.deduplicate:
                return AppendResult(length, previous, True), segment.segment_id, -1
            attributes[key] = event_number
        segment.length = length + size
        return AppendResult(length + size, previous), segment.segment_id, length

    def _accept_last_event_number(self, op: LastEventNumber, request: Request) -> object:
        name = request.names[0]
        segment = self._by_name.get(name)
        if segment is None or segment.gone:
            segment = self._by_name[name] = self._resolve(name)
        value = segment.attributes.get(op.writer_id.int)
        request.result = (
            value
            if value is not None
            else segment.committed.get(op.writer_id, NULL_ATTRIBUTE_VALUE)
        )
        return NO_WRITE

    def _accept_map(self, op: MapSegment, request: Request) -> object:
        name = op.name
        current = self._names[name] if name in self._names else self.metadata.by_name.get(name)
        if current is not None:
            raise SegmentExistsError(f"segment {name} already exists", segment=name)
        if self._next_id is None:
            self._next_id = self.metadata.next_segment_id
        op.segment_id = self._next_id
        self._next_id += 1
        self._names[name] = op.segment_id
        self._by_name.pop(name, None)
        self._segments[op.segment_id] = _Pending(op.segment_id, name, 0, 0, False, False, {}, {})
        request.result = None
        return op

    def _accept_seal(self, op: Seal, request: Request) -> object:
        segment = self._resolve(request.names[0])
        request.result = segment.length
        if segment.sealed:
            return NO_WRITE
        segment.sealed = True
        op.segment_id = segment.segment_id
        return op

    def _accept_truncate(self, op: Truncate, request: Request) -> object:
        segment = self._resolve(request.names[0])
        if op.offset > segment.length or op.offset < 0:
            raise BadOffsetError(
                f"{segment.name}: cannot truncate at {op.offset}, length is {segment.length}",
                segment=segment.name,
                length=segment.length,
            )
        request.result = None
        if op.offset <= segment.start_offset:
            return NO_WRITE
        segment.start_offset = op.offset
        op.segment_id = segment.segment_id
        return op

    def _accept_merge(self, op: Merge, request: Request) -> object:
        target = self._resolve(request.names[0])
        source = self._resolve(request.names[1])
        if target.segment_id == source.segment_id:
            raise BadOffsetError(f"cannot merge {target.name} into itself", segment=target.name)
        if target.sealed:
            raise SegmentSealedError(
                f"segment {target.name} is sealed", segment=target.name, length=target.length
            )
        if not source.sealed:
            raise SegmentSealedError(
                f"merge source {source.name} is not sealed",
                segment=source.name,
                length=source.length,
            )
        if source.start_offset != 0:
            raise BadOffsetError(f"merge source {source.name} was truncated", segment=source.name)
        op.target_id, op.source_id = target.segment_id, source.segment_id
        op.target_offset, op.length = target.length, source.length
        target.length += source.length
        source.gone = True
        self._names[source.name] = None
        request.result = target.length
        return op

    def _accept_attributes(self, op: UpdateAttributes, request: Request) -> object:
        segment = self._resolve(request.names[0])
        for key, expected in op.expected.items():
            current = segment.attribute(key)
            if current != expected:
                raise BadAttributeUpdateError(
                    f"{segment.name}: attribute {key} is {current}, expected {expected}",
                    segment=segment.name,
                )
        segment.attributes.update((key.int, value) for key, value in op.attributes.items())
        op.segment_id = segment.segment_id
        request.result = None
        return op

    def _accept_delete(self, op: Delete, request: Request) -> object:
        segment = self._resolve(request.names[0])
        segment.gone = True
        self._names[segment.name] = None
        op.segment_id = segment.segment_id
        request.result = None
        return op

    def _accept_internal(self, op: Operation, request: Request) -> object:
        request.result = None
        return op


def _from_committed(s: SegmentMetadata) -> _Pending:
    return _Pending(
        s.segment_id,
        s.name,
        s.length,
        s.start_offset,
        s.sealed,
        s.deleted or s.merged,
        {},
        s.attributes,
    )


_ACCEPT: dict[type[Operation], Callable[[MetadataUpdater, Any, Request], object]] = {
    MapSegment: MetadataUpdater._accept_map,
    Seal: MetadataUpdater._accept_seal,
    Truncate: MetadataUpdater._accept_truncate,
    Merge: MetadataUpdater._accept_merge,
    UpdateAttributes: MetadataUpdater._accept_attributes,
    Delete: MetadataUpdater._accept_delete,
    UpdateStorage: MetadataUpdater._accept_internal,
    MetadataCheckpoint: MetadataUpdater._accept_internal,
    LastEventNumber: MetadataUpdater._accept_last_event_number,
}
