"""What a Kafka record carries besides its value: its time, key and headers, kept beside the
partition's segment (in ``<segment>#kafka.records``, KAFKA_RECORDS_MARK).

Responsibility: the layout of that companion segment. Each produce appends one entry: a header
(the first record's offset, the record count, the byte where the values' events start, the
body's length) and a body (per record: its time, key and headers). An entry whose values did
not get in (another writer got there first, or the producer's retry was a duplicate) is voided
by a later entry with count ``VOID``. The values themselves are only in the partition's
segment, as events, so that every face reads them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

__all__ = ["ENTRY_HEAD", "VOID", "Entry", "RecordMeta", "decode_body", "encode_entry", "void_entry"]

#: base offset, record count (VOID: voids the entry of that base and start), values' start byte,
#: body length.
ENTRY_HEAD = struct.Struct(">qiqi")
VOID = -1
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


def encode_entry(base: int, start: int, records: Sequence[Any]) -> bytes:
    """The entry of ``records`` (aiokafka's decoded records: timestamp, key, headers)."""
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
    body = b"".join(parts)
    return ENTRY_HEAD.pack(base, len(records), start, len(body)) + body


def void_entry(base: int, start: int) -> bytes:
    return ENTRY_HEAD.pack(base, VOID, start, 0)


def decode_body(body: bytes, count: int) -> list[RecordMeta]:
    """The ``count`` records' metadata in an entry's body."""
    out: list[RecordMeta] = []
    at = 0
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
