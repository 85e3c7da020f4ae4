"""What a Kafka record carries besides its value: its time, key and headers, kept beside the
partition's segment (in ``<segment>#kafka.records``, KAFKA_RECORDS_MARK).

Responsibility: the layout of that companion segment, and the one pass over a produce's records
that makes both a block of events and an entry (``split``). Each produce appends one entry: a
header (the first record's offset, the record count, the byte where the values' events start,
the body's length) and a body (the records' times; and their keys and headers when any has
one). An entry whose values did not get in (another writer got there first, or the producer's
retry was a duplicate) is voided by a later entry with count ``VOID``. The values themselves are
only in the partition's segment, as events, so that every face reads them.
"""

from __future__ import annotations

import array
import struct
import sys
from collections.abc import Sequence
from typing import Any

from millrace.kernel.wire.event_frame import EVENT_HEADER, EVENT_TYPE

__all__ = [
    "ENTRY_HEAD",
    "VOID",
    "Entry",
    "RecordMeta",
    "decode_body",
    "encode_entry",
    "split",
    "void_entry",
]

#: base offset, record count (VOID: voids the entry of that base and start), values' start byte,
#: body length.
ENTRY_HEAD = struct.Struct(">qiqi")
VOID = -1
#: An entry body's first byte: the records' times alone (big-endian int64s), or per record its
#: time, key and headers.
TIMES, FULL = b"\x00", b"\x01"
_STAMP_KEY = struct.Struct(">qi")
_INT = struct.Struct(">i")

#: (timestamp in ms, key, headers)
RecordMeta = tuple[int, bytes | None, list[tuple[str, bytes | None]]]


class Entry:
    """An entry's header, and where its body lies in the companion segment."""

    __slots__ = ("base", "body_at", "body_length", "count", "start")

    def __init__(self, base: int, count: int, start: int, body_at: int, body_length: int) -> None:
        self.base, self.count, self.start = base, count, start
        self.body_at, self.body_length = body_at, body_length


def _field(value: bytes | None) -> bytes:
    if value is None:
        return b"\xff\xff\xff\xff"
    return _INT.pack(len(value)) + value


def split(records: Sequence[Any]) -> tuple[bytes, bytes]:
    """The records' values as events (one block of a segment), and their entry's body: their
    times alone (``TIMES``) when no record has a key or a header, else every record's time, key
    and headers (``FULL``). One pass over the records: the produce path's cost per record."""
    pack_frame = EVENT_HEADER.pack
    frames: list[bytes] = []
    add = frames.append
    stamps = array.array("q")
    stamp = stamps.append
    plain = True
    for record in records:
        value = record.value or b""
        add(pack_frame(EVENT_TYPE, len(value)))
        add(value)
        stamp(record.timestamp)
        if plain and (record.key is not None or record.headers):
            plain = False
    if plain:
        if sys.byteorder == "little":
            stamps.byteswap()
        return b"".join(frames), TIMES + stamps.tobytes()
    return b"".join(frames), FULL + _full_body(records)


def _full_body(records: Sequence[Any]) -> bytes:
    parts: list[bytes] = []
    stamp_key, pack_int = _STAMP_KEY.pack, _INT.pack
    for record in records:
        key = record.key
        headers = record.headers
        if key is None:
            parts.append(stamp_key(record.timestamp, -1))
        else:
            parts.append(stamp_key(record.timestamp, len(key)))
            parts.append(key)
        parts.append(pack_int(len(headers)))
        for name, value in headers:
            parts.append(_field(name.encode()))
            parts.append(_field(value))
    return b"".join(parts)


def encode_entry(base: int, start: int, count: int, body: bytes) -> bytes:
    """An entry of ``count`` records from offset ``base``, their values' events starting at
    byte ``start``, with ``body`` (``split``'s)."""
    return ENTRY_HEAD.pack(base, count, start, len(body)) + body


def void_entry(base: int, start: int) -> bytes:
    return ENTRY_HEAD.pack(base, VOID, start, 0)


def decode_body(body: bytes, count: int) -> list[RecordMeta]:
    """The ``count`` records' metadata in an entry's body."""
    if body[:1] == TIMES:
        stamps = array.array("q", body[1 : 1 + 8 * count])
        if sys.byteorder == "little":
            stamps.byteswap()
        return [(stamp, None, []) for stamp in stamps]
    out: list[RecordMeta] = []
    at = 1
    unpack_stamp, unpack_int = _STAMP_KEY.unpack_from, _INT.unpack_from
    for _ in range(count):
        stamp, length = unpack_stamp(body, at)
        at += _STAMP_KEY.size
        key = None
        if length >= 0:
            key = body[at : at + length]
            at += length
        (many,) = unpack_int(body, at)
        at += 4
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(many):
            (length,) = unpack_int(body, at)
            at += 4
            name = body[at : at + length].decode(errors="replace")
            at += length
            (length,) = unpack_int(body, at)
            at += 4
            value = None
            if length >= 0:
                value = body[at : at + length]
                at += length
            headers.append((name, value))
        out.append((stamp, key, headers))
    return out
