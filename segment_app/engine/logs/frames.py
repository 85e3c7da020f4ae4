"""Data frames: how log operations are packed into tier-1 entries.

Layout (version 1, big-endian)::

    magic "MRDF" | version u8 | flags u8 | reserved u16 | count u32 | first sequence u64
    | body length u32 | CRC32C(body) u32 | body

and the body is ``count`` records of ``length u32 | operation bytes``. A frame holds whole
operations only; the builder closes a frame before it would pass ``frame_bytes_max``.
"""

from __future__ import annotations

import itertools
import struct
import uuid
from collections.abc import Iterator

import crc32c

from segment_app.engine.logs.operations import (
    APPEND_HEAD,
    NO_WRITER_BYTES,
    Append,
    Operation,
    OperationFormatError,
    decode_operation,
    encode_operation,
)
from tiers.base import Gathered

__all__ = [
    "APPEND_RECORD_BYTES",
    "FRAME_HEADER_SIZE",
    "FRAME_PART_BYTES",
    "FrameBuilder",
    "FrameCorruptionError",
    "parse_frame",
]

_MAGIC = b"MRDF"
_VERSION = 1
_FRAME_HEADER = struct.Struct(">4sBBHIQII")
FRAME_HEADER_SIZE = _FRAME_HEADER.size
_NO_HEADER = bytes(FRAME_HEADER_SIZE)  # its place, until the frame is closed
#: A closed frame's parts at least this long are handed on as they are; shorter runs joined.
FRAME_PART_BYTES = 64 * 1024
_LEN = struct.Struct(">I")
#: The record of an Append up to its data: length prefix, then ``APPEND_HEAD``.
_APPEND_RECORD = struct.Struct(">I" + APPEND_HEAD.format[1:])
#: Bytes of an Append's record besides its data (``encoded_size`` = this + data length).
APPEND_RECORD_BYTES = _APPEND_RECORD.size


class FrameCorruptionError(OperationFormatError):
    """A frame whose header or checksum is wrong."""


class FrameBuilder:
    """Packs operations into frames of at most ``frame_bytes_max`` bytes.

    Records are kept as the list of their parts (data is referenced, not copied); a closed
    frame is that list with its small parts joined (``close``): growing one buffer record by
    record copied each byte several times over as it was reallocated."""

    __slots__ = ("_count", "_first", "_parts", "_size", "frame_bytes_max")

    def __init__(self, frame_bytes_max: int) -> None:
        self.frame_bytes_max = frame_bytes_max
        self._parts: list[bytes | bytearray | memoryview] = [_NO_HEADER]
        self._size = FRAME_HEADER_SIZE
        self._count = 0
        self._first = -1

    @staticmethod
    def encoded_size(parts: list[bytes | memoryview]) -> int:
        return _LEN.size + sum(map(len, parts))

    def fits(self, size: int) -> bool:
        """Whether a record of ``size`` bytes (``encoded_size``) still fits in this frame."""
        return self._size + size <= self.frame_bytes_max

    def add(
        self, op: Operation, parts: list[bytes | memoryview] | None = None, size: int = -1
    ) -> None:
        parts = parts if parts is not None else encode_operation(op)
        if size < 0:
            size = self.encoded_size(parts)
        if self._count == 0:
            self._first = op.sequence
        self._parts.append(_LEN.pack(size - _LEN.size))
        self._parts.extend(parts)
        self._size += size
        self._count += 1

    def add_append(
        self,
        sequence: int,
        segment_id: int,
        offset: int,
        writer_id: uuid.UUID | None,
        event_number: int,
        data: bytes | memoryview,
    ) -> None:
        """Add the record ``add(Append(...))`` would, without an ``Append`` object."""
        n = len(data)
        if self._count == 0:
            self._first = sequence
        parts = self._parts
        parts.append(
            _APPEND_RECORD.pack(
                APPEND_HEAD.size + n,
                Append.TYPE,
                Append.VERSION,
                sequence,
                segment_id,
                offset,
                writer_id.bytes if writer_id is not None else NO_WRITER_BYTES,
                event_number,
                n,
            )
        )
        parts.append(data)
        self._size += APPEND_RECORD_BYTES + n
        self._count += 1

    @property
    def empty(self) -> bool:
        return self._count == 0

    def close(self) -> list[bytes | memoryview]:
        """Finish the current frame and start a new one; returns the frame's bytes as a list
        of buffers in order (``FrameParts`` for tier-1): each run of small parts joined, each
        part of ``FRAME_PART_BYTES`` or more (an append's data) as it is, not copied (its
        owner never changes it). Joining a bulk writer's megabyte appends into one buffer was
        a copy of every byte the node took in."""
        gathered = Gathered(FRAME_PART_BYTES)
        for part in itertools.islice(self._parts, 1, None):
            gathered.add(part)
        out = gathered.done()
        checksum = 0
        for part in out:
            checksum = crc32c.crc32c(part, checksum)
        body_bytes = sum(map(len, out))
        header = _FRAME_HEADER.pack(
            _MAGIC, _VERSION, 0, 0, self._count, self._first, body_bytes, checksum
        )
        self._parts = [_NO_HEADER]
        self._size = FRAME_HEADER_SIZE
        self._count = 0
        self._first = -1
        return [header, *out]


def parse_frame(
    frame: bytes | memoryview, *, verify_crc: bool = True, copy_data: bool = True
) -> Iterator[Operation]:
    """Yield the operations of one frame; raise FrameCorruptionError if it is damaged."""
    view = memoryview(frame)
    if len(view) < FRAME_HEADER_SIZE:
        raise FrameCorruptionError(f"frame of {len(view)} bytes is shorter than its header")
    magic, version, _flags, _res, count, _first, body_len, checksum = _FRAME_HEADER.unpack(
        view[:FRAME_HEADER_SIZE]
    )
    if magic != _MAGIC or version != _VERSION:
        raise FrameCorruptionError(f"not a data frame (magic {magic!r}, version {version})")
    body = view[FRAME_HEADER_SIZE:]
    if len(body) != body_len:
        raise FrameCorruptionError(f"frame body is {len(body)} bytes, header says {body_len}")
    if verify_crc and crc32c.crc32c(body) != checksum:
        raise FrameCorruptionError("frame checksum mismatch")
    pos = 0
    for _ in range(count):
        if pos + _LEN.size > len(body):
            raise FrameCorruptionError("frame ends inside a record header")
        (n,) = _LEN.unpack_from(body, pos)
        pos += _LEN.size
        if pos + n > len(body):
            raise FrameCorruptionError("frame ends inside a record")
        yield decode_operation(body[pos : pos + n], copy_data=copy_data)
        pos += n
    if pos != len(body):
        raise FrameCorruptionError(f"{len(body) - pos} stray bytes after the last record")
