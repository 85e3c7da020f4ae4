"""Avro's binary encoding of Arrow columns, a column at a time with numpy (a typed write's
fast path; ``typed.Encoder``).

fastavro encodes one row per call, ~3.5 us for a record of five fields: as much as the rest of
a Spark write of that row. No library encodes Arrow columns into separate Avro datums (Polars
and Arrow write container files, whose datums cannot be told apart again), so a record of the
common flat kinds is encoded here by the Avro specification's rules, column by column:
``long``/``int`` (and ``date``, ``timestamp-*``) as zigzag varints, ``float``/``double``
little-endian, ``boolean`` one byte, ``string``/``bytes`` a varint length and the bytes, and a
union of one of them with ``null`` the branch's index before the value. Each field's bytes are
made for all rows at once, then laid side by side, row by row, behind each row's header.

``plan`` returns None for anything else (nested records, arrays, maps, enums, decimals, other
unions, an Arrow column of another kind than its field's, a null in a field that takes
none), and the write falls back to fastavro, which also names a row that does not fit.
``tests/spark/test_avro_arrow.py`` checks the bytes against fastavro's, bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["encode", "gather", "plan"]

#: The most bytes a varint of 64 bits takes.
VARINT_MAX = 10
#: Timestamps' units in Avro's logical types, as Arrow names them.
UNITS = {"timestamp-millis": "ms", "timestamp-micros": "us",
         "local-timestamp-millis": "ms", "local-timestamp-micros": "us"}  # fmt: skip
FIXED_WIDTH = {"float": "<f4", "double": "<f8"}

#: One part of every row's bytes: each row's length, and all rows' bytes in row order.
Part = tuple[np.ndarray, np.ndarray]


def _field_kind(kind: Any) -> tuple[str, int | None] | None:
    """A field's type as (kind, the index of its null branch or None), or None if not flat."""
    null_at = None
    if isinstance(kind, list):
        if len(kind) != 2 or "null" not in kind:
            return None
        null_at = kind.index("null")
        kind = kind[1 - null_at]
    if isinstance(kind, dict):
        logical = kind.get("logicalType")
        if logical == "date" and kind.get("type") == "int":
            return "date", null_at
        if logical in UNITS and kind.get("type") == "long":
            return str(logical), null_at
        if logical is not None or isinstance(kind.get("type"), (dict, list)):
            return None
        kind = kind.get("type")
    if kind in ("boolean", "int", "long", "float", "double", "string", "bytes"):
        return str(kind), null_at
    return None


def plan(schema: Any) -> list[tuple[str, str, int | None]] | None:
    """The (name, kind, null branch) of each field of a flat record schema (as fastavro
    parsed it), or None."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    fields = []
    for field in schema["fields"]:
        found = _field_kind(field["type"])
        if found is None:
            return None
        fields.append((field["name"], *found))
    return fields


def encode(
    fields: list[tuple[str, str, int | None]], columns: dict[str, Any], header: bytes, count: int
) -> pa.Array | None:
    """The rows' datums, each behind ``header``, as an Arrow binary array; None when a column
    does not fit its field (the caller falls back to fastavro)."""
    parts: list[Part] = [(np.full(count, len(header), np.int64), np.tile(
        np.frombuffer(header, np.uint8), count))]  # fmt: skip
    for name, kind, null_at in fields:
        column = columns.get(name)
        if column is None:
            return None
        valid = np.ones(count, bool) if column.null_count == 0 else ~np.asarray(column.is_null())
        if null_at is None and not valid.all():
            return None
        if null_at is not None:  # the branch's index, a one-byte varint: 0 -> 0x00, 1 -> 0x02
            index = np.where(valid, 2 * (1 - null_at), 2 * null_at).astype(np.uint8)
            parts.append((np.ones(count, np.int64), index))
        values = _values(column, kind, valid)
        if values is None:
            return None
        parts.extend(values)
    return _interleave(parts, count)


def _values(column: Any, kind: str, valid: np.ndarray) -> list[Part] | None:
    arrow = column.type
    if kind in ("string", "bytes"):
        if not (pa.types.is_string(arrow) or pa.types.is_binary(arrow)):
            return None
        buffers = column.buffers()
        offsets = np.frombuffer(buffers[1], np.int32, len(column) + 1, column.offset * 4)
        data = np.frombuffer(buffers[2], np.uint8) if buffers[2] else np.empty(0, np.uint8)
        lengths = np.where(valid, np.diff(offsets), 0).astype(np.int64)
        body = data[gather(offsets[:-1].astype(np.int64), lengths)]
        return [_varints(lengths, valid), (lengths, body)]
    if kind == "boolean":
        if not pa.types.is_boolean(arrow):
            return None
        flags = np.asarray(column.fill_null(False)).astype(np.uint8)
        return [(valid.astype(np.int64), flags[valid])]
    if kind in FIXED_WIDTH:
        if not (pa.types.is_floating(arrow) or pa.types.is_integer(arrow)):
            return None
        numbers = np.asarray(column.fill_null(0)).astype(FIXED_WIDTH[kind])
        width = numbers.itemsize
        raw = numbers.view(np.uint8).reshape(-1, width)[valid].ravel()
        return [(np.where(valid, width, 0).astype(np.int64), raw)]
    numbers = _integers(column, kind)
    return None if numbers is None else [_varints(numbers, valid)]


def _integers(column: Any, kind: str) -> np.ndarray | None:
    arrow = column.type
    if kind in ("int", "long") and pa.types.is_integer(arrow):
        numbers = np.asarray(column.fill_null(0).cast(pa.int64()))
        if (
            kind == "int"
            and len(numbers)
            and not -(2**31) <= numbers.min() <= numbers.max() < 2**31
        ):
            return None  # (fastavro then names the row out of an int's range)
        return numbers
    if kind == "date" and pa.types.is_date32(arrow):
        return np.asarray(column.fill_null(0).cast(pa.int32())).astype(np.int64)
    if kind in UNITS and pa.types.is_timestamp(arrow):
        unit = pa.timestamp(UNITS[kind], arrow.tz)
        return np.asarray(column.cast(unit).fill_null(0).cast(pa.int64()))
    return None


def _varints(numbers: np.ndarray, valid: np.ndarray) -> Part:
    """Zigzag varints of the valid rows' numbers."""
    signed = numbers.astype(np.int64)
    zigzag = ((signed << 1) ^ (signed >> 63)).astype(np.uint64)
    sizes = np.ones(len(zigzag), np.int64)
    for k in range(1, VARINT_MAX):
        sizes += zigzag >= np.uint64(1 << (7 * k))
    shifts = np.arange(VARINT_MAX, dtype=np.uint64) * np.uint64(7)
    groups = ((zigzag[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    more = np.arange(VARINT_MAX) < (sizes - 1)[:, None]
    groups |= (more * 0x80).astype(np.uint8)
    sizes = np.where(valid, sizes, 0)
    keep = np.arange(VARINT_MAX) < sizes[:, None]
    return sizes, groups[keep]


def gather(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indexes of the bytes of every range ``[start, start + length)``, in order."""
    total = int(lengths.sum())
    if not total:
        return np.empty(0, np.int64)
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(starts - firsts, lengths) + np.arange(total, dtype=np.int64)


def _interleave(parts: list[Part], count: int) -> pa.Array | None:
    """Each row's bytes of every part, one after the other, row after row."""
    sizes = np.stack([lengths for lengths, _ in parts])  # (parts, rows)
    row_sizes = sizes.sum(axis=0)
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(row_sizes, out=offsets[1:])
    if offsets[-1] >= 2**31:
        return None  # (a binary array's offsets are 32 bits: fastavro's rows then)
    out = np.empty(int(offsets[-1]), np.uint8)
    at = offsets[:-1].copy()
    for lengths, data in parts:
        if len(data):
            out[gather(at, lengths)] = data
        at += lengths
    return pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(out)]
    )
