"""Wire commands of the handshake, admin, append and read paths, one dataclass each.

Responsibility: name these commands of the protocol's command table with their type code and
field layout (Java v17 names in CamelCase, fields in snake_case, in wire order), and register the
list/sub-structure field kinds they and ``segment_commands`` use. Optional trailing fields (``?``)
default to what Java reads when they are absent. ``fastpath`` replaces the generic codecs of the
hot commands.
"""

from __future__ import annotations

import dataclasses
import uuid

# The 8-byte header (type 0, length) wrapping every event in segment data: event_frame's.
from millrace.kernel.wire.event_frame import EVENT_HEADER, EVENT_TYPE

from .codec import (
    NO_REQUEST_ID,
    Command,
    ProtocolError,
    Reader,
    Writer,
    register_kind,
    wire,
)

# Error codes of ErrorMessage and AuthTokenCheckFailed.
ERROR_UNSPECIFIED = -1
ERROR_ILLEGAL_ARGUMENT = 0
TOKEN_CHECK_FAILED = 0
TOKEN_EXPIRED = 1


# --------------------------------------------------------------------------------------------
# sub-structures


@dataclasses.dataclass(slots=True)
class ChunkInfo:
    """One tier-2 chunk of a segment, as listed by StorageChunksListed."""

    length_in_metadata: int
    length_in_storage: int
    start_offset: int
    chunk_name: str
    exists_in_storage: bool


@dataclasses.dataclass(slots=True)
class ConditionalAttributeUpdate:
    """An attribute update riding on MergeSegments (Java AttributeUpdateType codes)."""

    attribute_id: uuid.UUID
    update_type: int
    new_value: int
    old_value: int


def _read_list(r: Reader, read_item: object) -> tuple[object, ...]:
    count = r.i32()
    if count < 0 or count > r.remaining():
        raise ProtocolError(f"bad list count {count}")
    return tuple(read_item(r) for _ in range(count))  # type: ignore[operator]


def _read_chunk(r: Reader) -> ChunkInfo:
    return ChunkInfo(r.i64(), r.i64(), r.i64(), r.string(), r.flag())


def _write_chunks(w: Writer, chunks: tuple[ChunkInfo, ...]) -> None:
    w.i32(len(chunks))
    for c in chunks:
        w.i64(c.length_in_metadata)
        w.i64(c.length_in_storage)
        w.i64(c.start_offset)
        w.string(c.chunk_name)
        w.flag(c.exists_in_storage)


def _read_attr_update(r: Reader) -> ConditionalAttributeUpdate:
    return ConditionalAttributeUpdate(r.uid(), r.i8(), r.i64(), r.i64())


def _write_attr_updates(w: Writer, updates: tuple[ConditionalAttributeUpdate, ...]) -> None:
    w.i32(len(updates))
    for u in updates:
        w.uid(u.attribute_id)
        w.i8(u.update_type)
        w.i64(u.new_value)
        w.i64(u.old_value)


def _write_strings(w: Writer, values: tuple[str, ...]) -> None:
    w.i32(len(values))
    for v in values:
        w.string(v)


def _read_merged(r: Reader) -> tuple[str, int]:
    return (r.string(), r.i64())


def _write_merged(w: Writer, merged: tuple[tuple[str, int], ...]) -> None:
    w.i32(len(merged))
    for source, offset in merged:
        w.string(source)
        w.i64(offset)


def _read_event(r: Reader) -> memoryview:
    """An embedded Event: type int32 (must be 0), length int32, bytes; returns the bytes."""
    event_type = r.i32()
    if event_type != EVENT_TYPE:
        raise ProtocolError(f"embedded event has type {event_type}, expected {EVENT_TYPE}")
    return r.data()


def _write_event(w: Writer, data: bytes | memoryview) -> None:
    w.i32(EVENT_TYPE)
    w.data(data)


def _read_padding(r: Reader) -> int:
    return len(r.rest())


def _write_padding(w: Writer, length: int) -> None:
    w.raw(bytes(length))


register_kind("Chunks", lambda r: _read_list(r, _read_chunk), _write_chunks)
register_kind("AttrUpdates", lambda r: _read_list(r, _read_attr_update), _write_attr_updates)
register_kind("Strs", lambda r: _read_list(r, Reader.string), _write_strings)
register_kind("Merged", lambda r: _read_list(r, _read_merged), _write_merged)
register_kind("Event", _read_event, _write_event)
register_kind("PadLen", _read_padding, _write_padding)


# --------------------------------------------------------------------------------------------
# handshake, padding, admin


@wire(-127, "high_version I", "low_version I")
@dataclasses.dataclass(slots=True)
class Hello(Command):
    high_version: int
    low_version: int


#: Millrace's own command (no Pravega peer sends one): far from Pravega's table, which grows up.
TRACE_CONTEXT_TYPE = 1_000_001


@wire(TRACE_CONTEXT_TYPE, "traceparent S")
@dataclasses.dataclass(slots=True)
class TraceContext(Command):
    """The W3C trace context (``traceparent``) of the request that follows it on the connection.
    Millrace's client sends one before a request only while a sampled span is current
    (``millrace.kernel.traces``); the segment store then traces that request in the same trace.
    A server that does not know it would refuse it, so it goes to Millrace's nodes only."""

    traceparent: str


@wire(-1, "length PadLen")
@dataclasses.dataclass(slots=True)
class Padding(Command):
    length: int


@wire(-2, "data Rest")
@dataclasses.dataclass(slots=True)
class PartialEvent(Command):
    data: bytes | memoryview


@wire(-3, "container_id I", "delegation_token S", "request_id L")
@dataclasses.dataclass(slots=True)
class FlushToStorage(Command):
    container_id: int
    delegation_token: str
    request_id: int


@wire(-4, "request_id L")
@dataclasses.dataclass(slots=True)
class StorageFlushed(Command):
    request_id: int


@wire(-5, "segment S", "delegation_token S", "request_id L")
@dataclasses.dataclass(slots=True)
class ListStorageChunks(Command):
    segment: str
    delegation_token: str
    request_id: int


@wire(-6, "request_id L", "chunks Chunks")
@dataclasses.dataclass(slots=True)
class StorageChunksListed(Command):
    request_id: int
    chunks: tuple[ChunkInfo, ...] = ()


@wire(0, "data Rest")
@dataclasses.dataclass(slots=True)
class Event(Command):
    """A bare event frame; inside segment data this is the 8-byte event header + bytes."""

    data: bytes | memoryview


@wire(100)
@dataclasses.dataclass(slots=True)
class KeepAlive(Command):
    pass


# --------------------------------------------------------------------------------------------
# appends


@wire(1, "request_id L", "writer_id U", "segment S", "delegation_token S")
@dataclasses.dataclass(slots=True)
class SetupAppend(Command):
    request_id: int
    writer_id: uuid.UUID
    segment: str
    delegation_token: str = ""


@wire(2, "request_id L", "segment S", "writer_id U", "last_event_number L")
@dataclasses.dataclass(slots=True)
class AppendSetup(Command):
    request_id: int
    segment: str
    writer_id: uuid.UUID
    last_event_number: int


@wire(3, "writer_id U", "data Rest")
@dataclasses.dataclass(slots=True)
class AppendBlock(Command):
    writer_id: uuid.UUID
    data: bytes | memoryview


@wire(
    4,
    "writer_id U",
    "size_of_whole_events I",
    "data Data",
    "num_events I",
    "last_event_number L",
    "request_id L?",
)
@dataclasses.dataclass(slots=True)
class AppendBlockEnd(Command):
    writer_id: uuid.UUID
    size_of_whole_events: int
    data: bytes | memoryview
    num_events: int
    last_event_number: int
    request_id: int = NO_REQUEST_ID


@wire(
    5,
    "writer_id U",
    "event_number L",
    "expected_offset L",
    "data Event",
    "request_id L?",
)
@dataclasses.dataclass(slots=True)
class ConditionalAppend(Command):
    """``data`` is the event's bytes; on the wire they are wrapped in an Event (type 0, length)."""

    writer_id: uuid.UUID
    event_number: int
    expected_offset: int
    data: bytes | memoryview
    request_id: int = NO_REQUEST_ID


@wire(
    7,
    "writer_id U",
    "event_number L",
    "previous_event_number L?",
    "request_id L?",
    "current_segment_write_offset L?",
)
@dataclasses.dataclass(slots=True)
class DataAppended(Command):
    writer_id: uuid.UUID
    event_number: int
    previous_event_number: int = -1
    request_id: int = NO_REQUEST_ID
    current_segment_write_offset: int = -1


@wire(8, "writer_id U", "event_number L", "request_id L?")
@dataclasses.dataclass(slots=True)
class ConditionalCheckFailed(Command):
    writer_id: uuid.UUID
    event_number: int
    request_id: int = NO_REQUEST_ID


@wire(
    89,
    "writer_id U",
    "event_number L",
    "expected_offset L",
    "data Data",
    "request_id L",
)
@dataclasses.dataclass(slots=True)
class ConditionalBlockEnd(Command):
    writer_id: uuid.UUID
    event_number: int
    expected_offset: int
    data: bytes | memoryview
    request_id: int


# --------------------------------------------------------------------------------------------
# reads and segment info


@wire(9, "segment S", "offset L", "suggested_length I", "delegation_token S", "request_id L?")
@dataclasses.dataclass(slots=True)
class ReadSegment(Command):
    segment: str
    offset: int
    suggested_length: int
    delegation_token: str = ""
    request_id: int = NO_REQUEST_ID


@wire(
    10,
    "segment S",
    "offset L",
    "at_tail Z",
    "end_of_segment Z",
    "data Data",
    "request_id L?",
)
@dataclasses.dataclass(slots=True)
class SegmentRead(Command):
    segment: str
    offset: int
    at_tail: bool
    end_of_segment: bool
    data: bytes | memoryview
    request_id: int = NO_REQUEST_ID


@wire(11, "request_id L", "segment_name S", "delegation_token S")
@dataclasses.dataclass(slots=True)
class GetStreamSegmentInfo(Command):
    request_id: int
    segment_name: str
    delegation_token: str = ""


@wire(
    12,
    "request_id L",
    "segment_name S",
    "exists Z",
    "is_sealed Z",
    "is_deleted Z",
    "last_modified L",
    "write_offset L",
    "start_offset L?",
)
@dataclasses.dataclass(slots=True)
class StreamSegmentInfo(Command):
    request_id: int
    segment_name: str
    exists: bool
    is_sealed: bool
    is_deleted: bool
    last_modified: int
    write_offset: int
    start_offset: int = 0


@wire(41, "request_id L", "segment S", "target_offset L", "delegation_token S")
@dataclasses.dataclass(slots=True)
class LocateOffset(Command):
    request_id: int
    segment: str
    target_offset: int
    delegation_token: str = ""


@wire(42, "request_id L", "segment S", "offset L")
@dataclasses.dataclass(slots=True)
class OffsetLocated(Command):
    request_id: int
    segment: str
    offset: int


__all__ = [
    "ERROR_ILLEGAL_ARGUMENT",
    "ERROR_UNSPECIFIED",
    "EVENT_HEADER",
    "EVENT_TYPE",
    "TOKEN_CHECK_FAILED",
    "TOKEN_EXPIRED",
    "TRACE_CONTEXT_TYPE",
    "AppendBlock",
    "AppendBlockEnd",
    "AppendSetup",
    "ChunkInfo",
    "ConditionalAppend",
    "ConditionalAttributeUpdate",
    "ConditionalBlockEnd",
    "ConditionalCheckFailed",
    "DataAppended",
    "Event",
    "FlushToStorage",
    "GetStreamSegmentInfo",
    "Hello",
    "KeepAlive",
    "ListStorageChunks",
    "LocateOffset",
    "OffsetLocated",
    "Padding",
    "PartialEvent",
    "ReadSegment",
    "SegmentRead",
    "SetupAppend",
    "StorageChunksListed",
    "StorageFlushed",
    "StreamSegmentInfo",
    "TraceContext",
]
