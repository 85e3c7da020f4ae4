"""Log operations: the units a container writes to its durable log, and their byte format.

Every operation gets a sequence number from the durable log. Each type has its own versioned
serialization: ``type u8 | version u8 | sequence u64 | body``; a decoder accepts every version it
ever wrote (golden fixtures in ``tests/fixtures/engine`` keep old bytes decoding). Integers are
big-endian. Only ``Append`` carries segment data.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from typing import ClassVar

__all__ = [
    "APPEND_HEAD",
    "NO_WRITER_BYTES",
    "Append",
    "AppendRecord",
    "ChunkRecord",
    "Delete",
    "MapSegment",
    "Merge",
    "MetadataCheckpoint",
    "Operation",
    "OperationFormatError",
    "Seal",
    "Truncate",
    "UpdateAttributes",
    "UpdateStorage",
    "decode_operation",
    "encode_operation",
]

_HEADER = struct.Struct(">BBQ")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_ATTR = struct.Struct(">16sq")
#: An Append's bytes before its data: the operation header (type, version, sequence) and
#: segment id, offset, writer id (16 zero bytes for none), event number, data length.
APPEND_HEAD = struct.Struct(">BBQQQ16sqI")
_APPEND_FIXED = struct.Struct(">QQ16sqI")  # APPEND_HEAD after the operation header
_MERGE = struct.Struct(">QQQQ")
_TRUNCATE = struct.Struct(">QQ")
_CHUNK = struct.Struct(">QQQ")  # start, length, epoch (name follows)
_STORAGE = struct.Struct(">QQIIqB")  # id, storage length, drop head, keep, merged source, flags
#: The writer id bytes of an append without a writer.
NO_WRITER_BYTES = bytes(16)

#: An accepted append as the durable log commits it without an ``Append`` object (the wire
#: server's groups): sequence, segment id, offset, data, writer id, event number.
AppendRecord = tuple[int, int, int, "bytes | memoryview", "uuid.UUID | None", int]


class OperationFormatError(ValueError):
    """Bytes that are not a valid operation of a known type and version."""


@dataclasses.dataclass(slots=True)
class Operation:
    """Base of all log operations. ``sequence`` is assigned by the durable log (-1 before)."""

    TYPE: ClassVar[int] = 0
    VERSION: ClassVar[int] = 1
    sequence: int = dataclasses.field(default=-1, kw_only=True)

    #: Operations whose effect must reach tier-2 before tier-1 may be truncated past them.
    STORAGE_RELEVANT: ClassVar[bool] = False


@dataclasses.dataclass(slots=True)
class MapSegment(Operation):
    """Create a segment: bind a new segment id to a name."""

    TYPE: ClassVar[int] = 1
    segment_id: int
    name: str


@dataclasses.dataclass(slots=True)
class Append(Operation):
    """Append ``data`` at ``offset``; an idempotent writer's last event number rides along."""

    TYPE: ClassVar[int] = 2
    STORAGE_RELEVANT: ClassVar[bool] = True
    segment_id: int
    data: bytes | memoryview
    offset: int = -1
    writer_id: uuid.UUID | None = None
    event_number: int = 0
    #: Conditional append: the segment length the caller expects (not serialized).
    expected_offset: int | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(slots=True)
class Seal(Operation):
    TYPE: ClassVar[int] = 3
    STORAGE_RELEVANT: ClassVar[bool] = True
    segment_id: int


@dataclasses.dataclass(slots=True)
class Truncate(Operation):
    TYPE: ClassVar[int] = 4
    STORAGE_RELEVANT: ClassVar[bool] = True
    segment_id: int
    offset: int


@dataclasses.dataclass(slots=True)
class Merge(Operation):
    """Append all of sealed segment ``source_id`` to ``target_id`` at ``target_offset``."""

    TYPE: ClassVar[int] = 5
    STORAGE_RELEVANT: ClassVar[bool] = True
    target_id: int
    source_id: int
    target_offset: int = -1
    length: int = -1


@dataclasses.dataclass(slots=True)
class UpdateAttributes(Operation):
    """Set attributes; ``expected`` (not serialized) holds compare-and-set conditions."""

    TYPE: ClassVar[int] = 6
    segment_id: int
    attributes: dict[uuid.UUID, int]
    expected: dict[uuid.UUID, int] = dataclasses.field(default_factory=dict, compare=False)


@dataclasses.dataclass(slots=True)
class Delete(Operation):
    TYPE: ClassVar[int] = 7
    STORAGE_RELEVANT: ClassVar[bool] = True
    segment_id: int


@dataclasses.dataclass(slots=True)
class MetadataCheckpoint(Operation):
    """A snapshot of the whole container metadata as of this operation's sequence number."""

    TYPE: ClassVar[int] = 8
    snapshot: bytes = b""


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkRecord:
    """One tier-2 chunk of a segment: ``length`` bytes holding segment offsets from ``start``."""

    name: str
    start: int
    length: int
    epoch: int

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclasses.dataclass(slots=True)
class UpdateStorage(Operation):
    """The storage writer changed tier-2: new chunk layout and storage length of a segment.

    The new chunk list is ``old[drop_head:keep] + chunks``. ``merged_source_id`` (or -1) names a
    merged source whose chunks are now relinked into this segment and which ceases to exist.
    """

    TYPE: ClassVar[int] = 9
    segment_id: int
    storage_length: int
    drop_head: int = 0
    keep: int = 0
    chunks: list[ChunkRecord] = dataclasses.field(default_factory=list)
    merged_source_id: int = -1
    sealed_in_storage: bool = False
    deleted_in_storage: bool = False


# -- encoding ----------------------------------------------------------------------------------


def _str(value: str) -> bytes:
    raw = value.encode()
    return _U16.pack(len(raw)) + raw


def _attrs(attributes: dict[uuid.UUID, int]) -> bytes:
    parts = [_U32.pack(len(attributes))]
    parts.extend(_ATTR.pack(key.bytes, value) for key, value in attributes.items())
    return b"".join(parts)


def encode_operation(op: Operation) -> list[bytes | memoryview]:
    """Serialize ``op`` as a list of buffers (so appended data is not copied here)."""
    if isinstance(op, Append):
        writer = op.writer_id.bytes if op.writer_id is not None else NO_WRITER_BYTES
        head = APPEND_HEAD.pack(
            op.TYPE,
            op.VERSION,
            op.sequence,
            op.segment_id,
            op.offset,
            writer,
            op.event_number,
            len(op.data),
        )
        return [head, op.data]
    return [_HEADER.pack(op.TYPE, op.VERSION, op.sequence) + _encode_body(op)]


def _encode_body(op: Operation) -> bytes:
    if isinstance(op, MapSegment):
        return _U64.pack(op.segment_id) + _str(op.name)
    if isinstance(op, Seal | Delete):
        return _U64.pack(op.segment_id)
    if isinstance(op, Truncate):
        return _TRUNCATE.pack(op.segment_id, op.offset)
    if isinstance(op, Merge):
        return _MERGE.pack(op.target_id, op.source_id, op.target_offset, op.length)
    if isinstance(op, UpdateAttributes):
        return _U64.pack(op.segment_id) + _attrs(op.attributes)
    if isinstance(op, MetadataCheckpoint):
        return _U32.pack(len(op.snapshot)) + op.snapshot
    if isinstance(op, UpdateStorage):
        return _encode_update_storage(op)
    raise OperationFormatError(f"cannot encode {type(op).__name__}")


def _encode_update_storage(op: UpdateStorage) -> bytes:
    flags = int(op.sealed_in_storage) | (int(op.deleted_in_storage) << 1)
    parts = [
        _STORAGE.pack(
            op.segment_id, op.storage_length, op.drop_head, op.keep, op.merged_source_id, flags
        ),
        _U32.pack(len(op.chunks)),
    ]
    parts.extend(encode_chunk(c) for c in op.chunks)
    return b"".join(parts)


def encode_chunk(chunk: ChunkRecord) -> bytes:
    return _CHUNK.pack(chunk.start, chunk.length, chunk.epoch) + _str(chunk.name)


# -- decoding ----------------------------------------------------------------------------------


class Reader:
    """A cursor over a buffer; every read checks bounds and raises OperationFormatError."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise OperationFormatError(f"truncated: need {n} bytes at {self.pos}")
        view = self.buf[self.pos : end]
        self.pos = end
        return view

    def unpack(self, fmt: struct.Struct) -> tuple:  # type: ignore[type-arg]
        return fmt.unpack(self.take(fmt.size))

    def string(self) -> str:
        (n,) = self.unpack(_U16)
        try:
            return bytes(self.take(n)).decode()
        except UnicodeDecodeError as error:
            raise OperationFormatError(f"bad UTF-8 string: {error}") from None

    def attrs(self) -> dict[uuid.UUID, int]:
        (count,) = self.unpack(_U32)
        if count * _ATTR.size > len(self.buf) - self.pos:
            raise OperationFormatError(f"attribute count {count} exceeds the buffer")
        result = {}
        for _ in range(count):
            key, value = self.unpack(_ATTR)
            result[uuid.UUID(bytes=bytes(key))] = value
        return result

    def chunk(self) -> ChunkRecord:
        start, length, epoch = self.unpack(_CHUNK)
        return ChunkRecord(self.string(), start, length, epoch)

    def done(self) -> bool:
        return self.pos >= len(self.buf)


def decode_operation(buf: bytes | memoryview, *, copy_data: bool = True) -> Operation:
    """Decode one operation. ``copy_data=False`` leaves Append data as a view into ``buf``."""
    reader = Reader(buf)
    op_type, version, sequence = reader.unpack(_HEADER)
    decoder = _DECODERS.get((op_type, version))
    if decoder is None:
        raise OperationFormatError(f"unknown operation type {op_type} version {version}")
    op = decoder(reader, copy_data)
    op.sequence = sequence
    if not reader.done():
        raise OperationFormatError(f"{len(reader.buf) - reader.pos} trailing bytes after {op}")
    return op


def _decode_map(r: Reader, _copy: bool) -> Operation:
    (segment_id,) = r.unpack(_U64)
    return MapSegment(segment_id, r.string())


def _decode_append(r: Reader, copy: bool) -> Operation:
    segment_id, offset, writer, event_number, length = r.unpack(_APPEND_FIXED)
    data = r.take(length)
    writer_id = None if bytes(writer) == NO_WRITER_BYTES else uuid.UUID(bytes=bytes(writer))
    return Append(segment_id, bytes(data) if copy else data, offset, writer_id, event_number)


def _decode_storage(r: Reader, _copy: bool) -> Operation:
    segment_id, storage_length, drop_head, keep, merged, flags = r.unpack(_STORAGE)
    (count,) = r.unpack(_U32)
    chunks = [r.chunk() for _ in range(count)]
    return UpdateStorage(
        segment_id,
        storage_length,
        drop_head,
        keep,
        chunks,
        merged,
        bool(flags & 1),
        bool(flags & 2),
    )


def _decode_checkpoint(r: Reader, _copy: bool) -> Operation:
    (n,) = r.unpack(_U32)
    return MetadataCheckpoint(snapshot=bytes(r.take(n)))


_DECODERS = {
    (1, 1): _decode_map,
    (2, 1): _decode_append,
    (3, 1): lambda r, _c: Seal(r.unpack(_U64)[0]),
    (4, 1): lambda r, _c: Truncate(*r.unpack(_TRUNCATE)),
    (5, 1): lambda r, _c: Merge(*r.unpack(_MERGE)),
    (6, 1): lambda r, _c: UpdateAttributes(r.unpack(_U64)[0], r.attrs()),
    (7, 1): lambda r, _c: Delete(r.unpack(_U64)[0]),
    (8, 1): _decode_checkpoint,
    (9, 1): _decode_storage,
}
