"""Table-segment wire commands (type codes 68-88) and their sub-structures.

Responsibility: the byte layouts of TableKey, TableValue, TableEntries and TableIteratorArgs and
of every table command, so that table segments can be served later without touching the codec.

* TableKey = payloadSize I (4 + keyLength + 8), keyLength I, key bytes, keyVersion L. Java omits
  the version of an empty key (so do we, when it is KEY_NO_VERSION); the decoder reads it
  whenever the payload size leaves room for it.
* TableValue = payloadSize I (4 + valueLength), valueLength I, value bytes.
* TableEntries = count I, then (TableKey, TableValue) x count.
* TableIteratorArgs = up to four int32-length buffers (continuation token, prefix filter, from
  key, to key); missing trailing ones read as empty.
"""

from __future__ import annotations

import dataclasses

from .codec import Command, ProtocolError, Reader, Writer, register_kind, wire

#: Key version meaning "unconditional" (Java Long.MIN_VALUE).
KEY_NO_VERSION = -(2**63)
#: Key version meaning "the key must not exist".
KEY_NOT_EXISTS = -1
#: Table segment offset meaning "no offset check".
NO_TABLE_SEGMENT_OFFSET = -1

_VERSION_BYTES = 8


@dataclasses.dataclass(slots=True)
class TableKey:
    data: bytes
    version: int = KEY_NO_VERSION


@dataclasses.dataclass(slots=True)
class TableValue:
    data: bytes


@dataclasses.dataclass(slots=True)
class TableIteratorArgs:
    continuation_token: bytes = b""
    prefix_filter: bytes = b""
    from_key: bytes = b""
    to_key: bytes = b""


def _sub_reader(r: Reader, what: str) -> Reader:
    size = r.i32()
    if size < 4:
        raise ProtocolError(f"{what} payload size {size} is below 4")
    start = r.take(size)
    return Reader(r.mv, start, start + size)


def read_table_key(r: Reader) -> TableKey:
    sub = _sub_reader(r, "TableKey")
    key = sub.buf()
    version = KEY_NO_VERSION
    if sub.remaining():
        version = sub.i64()
    if sub.remaining():
        raise ProtocolError(f"TableKey has {sub.remaining()} stray bytes")
    return TableKey(key, version)


def write_table_key(w: Writer, key: TableKey) -> None:
    if key.data or key.version != KEY_NO_VERSION:
        w.i32(4 + len(key.data) + _VERSION_BYTES)
        w.data(key.data)
        w.i64(key.version)
    else:
        w.i32(4)
        w.i32(0)


def read_table_value(r: Reader) -> TableValue:
    sub = _sub_reader(r, "TableValue")
    value = sub.buf()
    if sub.remaining():
        raise ProtocolError(f"TableValue has {sub.remaining()} stray bytes")
    return TableValue(value)


def write_table_value(w: Writer, value: TableValue) -> None:
    w.i32(4 + len(value.data))
    w.data(value.data)


def _read_count(r: Reader) -> int:
    count = r.i32()
    if count < 0 or count > r.remaining():
        raise ProtocolError(f"bad list count {count}")
    return count


def read_table_entries(r: Reader) -> tuple[tuple[TableKey, TableValue], ...]:
    return tuple((read_table_key(r), read_table_value(r)) for _ in range(_read_count(r)))


def write_table_entries(w: Writer, entries: tuple[tuple[TableKey, TableValue], ...]) -> None:
    w.i32(len(entries))
    for key, value in entries:
        write_table_key(w, key)
        write_table_value(w, value)


def read_table_keys(r: Reader) -> tuple[TableKey, ...]:
    return tuple(read_table_key(r) for _ in range(_read_count(r)))


def write_table_keys(w: Writer, keys: tuple[TableKey, ...]) -> None:
    w.i32(len(keys))
    for key in keys:
        write_table_key(w, key)


def read_iterator_args(r: Reader) -> TableIteratorArgs:
    return TableIteratorArgs(*(r.buf() for _ in range(4) if r.remaining()))


def write_iterator_args(w: Writer, args: TableIteratorArgs) -> None:
    for value in (args.continuation_token, args.prefix_filter, args.from_key, args.to_key):
        w.data(value)


def _read_versions(r: Reader) -> tuple[int, ...]:
    return tuple(r.i64() for _ in range(_read_count(r)))


def _write_versions(w: Writer, versions: tuple[int, ...]) -> None:
    w.i32(len(versions))
    for v in versions:
        w.i64(v)


register_kind("Entries", read_table_entries, write_table_entries)
register_kind("Keys", read_table_keys, write_table_keys)
register_kind("IterArgs", read_iterator_args, write_iterator_args)
register_kind("Versions", _read_versions, _write_versions)

TableEntryList = tuple[tuple[TableKey, TableValue], ...]


@wire(68, "request_id L", "segment_name S", "delegation_token S")
@dataclasses.dataclass(slots=True)
class GetTableSegmentInfo(Command):
    request_id: int
    segment_name: str
    delegation_token: str = ""


@wire(
    69,
    "request_id L",
    "segment_name S",
    "start_offset L",
    "length L",
    "entry_count L",
    "key_length I",
)
@dataclasses.dataclass(slots=True)
class TableSegmentInfo(Command):
    request_id: int
    segment_name: str
    start_offset: int
    length: int
    entry_count: int
    key_length: int


@wire(
    70,
    "request_id L",
    "segment S",
    "delegation_token S",
    "sorted_deprecated Z?",
    "key_length I?",
    "rollover_size_bytes L?",
)
@dataclasses.dataclass(slots=True)
class CreateTableSegment(Command):
    request_id: int
    segment: str
    delegation_token: str
    sorted_deprecated: bool = False
    key_length: int = 0
    rollover_size_bytes: int = 0


@wire(71, "request_id L", "segment S", "must_be_empty Z", "delegation_token S")
@dataclasses.dataclass(slots=True)
class DeleteTableSegment(Command):
    request_id: int
    segment: str
    must_be_empty: bool
    delegation_token: str = ""


@wire(72, "request_id L", "target S", "source S", "delegation_token S")
@dataclasses.dataclass(slots=True)
class MergeTableSegments(Command):
    """Rust-only (removed from Java); never sent by the Python wheel."""

    request_id: int
    target: str
    source: str
    delegation_token: str = ""


@wire(73, "request_id L", "segment S", "delegation_token S")
@dataclasses.dataclass(slots=True)
class SealTableSegment(Command):
    """Rust-only (removed from Java); never sent by the Python wheel."""

    request_id: int
    segment: str
    delegation_token: str = ""


@wire(
    74,
    "request_id L",
    "segment S",
    "delegation_token S",
    "table_entries Entries",
    "table_segment_offset L?",
)
@dataclasses.dataclass(slots=True)
class UpdateTableEntries(Command):
    request_id: int
    segment: str
    delegation_token: str
    table_entries: TableEntryList
    table_segment_offset: int = NO_TABLE_SEGMENT_OFFSET


@wire(75, "request_id L", "updated_versions Versions")
@dataclasses.dataclass(slots=True)
class TableEntriesUpdated(Command):
    request_id: int
    updated_versions: tuple[int, ...]


@wire(
    76,
    "request_id L",
    "segment S",
    "delegation_token S",
    "keys Keys",
    "table_segment_offset L?",
)
@dataclasses.dataclass(slots=True)
class RemoveTableKeys(Command):
    request_id: int
    segment: str
    delegation_token: str
    keys: tuple[TableKey, ...]
    table_segment_offset: int = NO_TABLE_SEGMENT_OFFSET


@wire(77, "request_id L", "segment S")
@dataclasses.dataclass(slots=True)
class TableKeysRemoved(Command):
    request_id: int
    segment: str


@wire(78, "request_id L", "segment S", "delegation_token S", "keys Keys")
@dataclasses.dataclass(slots=True)
class ReadTable(Command):
    request_id: int
    segment: str
    delegation_token: str
    keys: tuple[TableKey, ...]


@wire(79, "request_id L", "segment S", "entries Entries")
@dataclasses.dataclass(slots=True)
class TableRead(Command):
    request_id: int
    segment: str
    entries: TableEntryList


@wire(80, "request_id L", "segment S", "server_stack_trace S")
@dataclasses.dataclass(slots=True)
class TableSegmentNotEmpty(Command):
    request_id: int
    segment: str
    server_stack_trace: str = ""


@wire(81, "request_id L", "segment S", "server_stack_trace S")
@dataclasses.dataclass(slots=True)
class TableKeyDoesNotExist(Command):
    request_id: int
    segment: str
    server_stack_trace: str = ""


@wire(82, "request_id L", "segment S", "server_stack_trace S")
@dataclasses.dataclass(slots=True)
class TableKeyBadVersion(Command):
    request_id: int
    segment: str
    server_stack_trace: str = ""


@wire(
    83,
    "request_id L",
    "segment S",
    "delegation_token S",
    "suggested_key_count I",
    "args IterArgs",
)
@dataclasses.dataclass(slots=True)
class ReadTableKeys(Command):
    request_id: int
    segment: str
    delegation_token: str
    suggested_key_count: int
    args: TableIteratorArgs = dataclasses.field(default_factory=TableIteratorArgs)


@wire(84, "request_id L", "segment S", "keys Keys", "continuation_token Buf")
@dataclasses.dataclass(slots=True)
class TableKeysRead(Command):
    request_id: int
    segment: str
    keys: tuple[TableKey, ...]
    continuation_token: bytes = b""


@wire(
    85,
    "request_id L",
    "segment S",
    "delegation_token S",
    "suggested_entry_count I",
    "args IterArgs",
)
@dataclasses.dataclass(slots=True)
class ReadTableEntries(Command):
    request_id: int
    segment: str
    delegation_token: str
    suggested_entry_count: int
    args: TableIteratorArgs = dataclasses.field(default_factory=TableIteratorArgs)


@wire(86, "request_id L", "segment S", "entries Entries", "continuation_token Buf")
@dataclasses.dataclass(slots=True)
class TableEntriesRead(Command):
    request_id: int
    segment: str
    entries: TableEntryList
    continuation_token: bytes = b""


@wire(
    87,
    "request_id L",
    "segment S",
    "entries Entries",
    "should_clear Z",
    "reached_end Z",
    "last_position L",
)
@dataclasses.dataclass(slots=True)
class TableEntriesDeltaRead(Command):
    request_id: int
    segment: str
    entries: TableEntryList
    should_clear: bool
    reached_end: bool
    last_position: int


@wire(
    88,
    "request_id L",
    "segment S",
    "delegation_token S",
    "from_position L",
    "suggested_entry_count I",
)
@dataclasses.dataclass(slots=True)
class ReadTableEntriesDelta(Command):
    request_id: int
    segment: str
    delegation_token: str
    from_position: int
    suggested_entry_count: int


__all__ = [
    "KEY_NOT_EXISTS",
    "KEY_NO_VERSION",
    "NO_TABLE_SEGMENT_OFFSET",
    "CreateTableSegment",
    "DeleteTableSegment",
    "GetTableSegmentInfo",
    "MergeTableSegments",
    "ReadTable",
    "ReadTableEntries",
    "ReadTableEntriesDelta",
    "ReadTableKeys",
    "RemoveTableKeys",
    "SealTableSegment",
    "TableEntriesDeltaRead",
    "TableEntriesRead",
    "TableEntriesUpdated",
    "TableIteratorArgs",
    "TableKey",
    "TableKeyBadVersion",
    "TableKeyDoesNotExist",
    "TableKeysRead",
    "TableKeysRemoved",
    "TableRead",
    "TableSegmentInfo",
    "TableSegmentNotEmpty",
    "TableValue",
    "UpdateTableEntries",
]
