"""Table-segment calls on one connection (Pravega's table commands).

Responsibility: each table command is a ``TableRequest`` (how to build it, its reply, how to
read the reply), apart from how it is sent; ``TableCalls`` sends them over a ``SegmentCalls``
(its request matching, token and token renewal), ``direct.DirectConnection`` over a blocking
socket, and both give back plain values: versions, ``(value, version)``
pairs, pages of entries with their continuation token. A version is the entry's offset in its
table segment; ``NO_VERSION`` makes a change unconditional and ``NOT_EXISTS`` requires the key
to be absent. Refused conditions are ``TableKeyBadVersionError`` and
``TableKeyDoesNotExistError`` (``millrace.client.errors``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from millrace.client.transport.calls import SegmentCalls
from millrace.kernel import wire

__all__ = [
    "NOT_EXISTS",
    "NO_VERSION",
    "TableCalls",
    "TableEntry",
    "TablePage",
    "TableRequest",
    "entries_request",
    "get_request",
    "remove_request",
    "update_request",
]

T = TypeVar("T")

NO_VERSION = wire.KEY_NO_VERSION
NOT_EXISTS = wire.KEY_NOT_EXISTS


@dataclasses.dataclass(frozen=True, slots=True)
class TableEntry:
    key: bytes
    value: bytes
    version: int


@dataclasses.dataclass(frozen=True, slots=True)
class TablePage:
    """Entries (or keys, with empty values) in key order, and the token to go on with (the
    same token when nothing was left)."""

    entries: list[TableEntry]
    token: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class TableRequest(Generic[T]):
    """One table command, apart from how it is sent: ``make(request id, token)`` builds it,
    ``expected`` is its success reply's type and ``parse`` turns that reply into the answer.
    ``TableCalls.run`` sends it over an asyncio connection, ``direct.DirectConnection.run``
    over a blocking socket."""

    make: Callable[[int, str], Any]
    expected: type
    parse: Callable[[Any], T]


def create_request(segment: str) -> TableRequest[None]:
    return TableRequest(
        lambda rid, token: wire.CreateTableSegment(rid, segment, token),
        wire.SegmentCreated, _nothing,
    )  # fmt: skip


def delete_request(segment: str, *, must_be_empty: bool) -> TableRequest[None]:
    return TableRequest(
        lambda rid, token: wire.DeleteTableSegment(rid, segment, must_be_empty, token),
        wire.SegmentDeleted, _nothing,
    )  # fmt: skip


def info_request(segment: str) -> TableRequest[tuple[int, int, int]]:
    """(start offset, length, entry count)."""
    return TableRequest(
        lambda rid, token: wire.GetTableSegmentInfo(rid, segment, token),
        wire.TableSegmentInfo, lambda r: (r.start_offset, r.length, r.entry_count),
    )  # fmt: skip


def update_request(
    segment: str, entries: Sequence[tuple[bytes, bytes, int]]
) -> TableRequest[list[int]]:
    """Put ``(key, value, expected version)`` entries, all or none; their new versions."""
    items = tuple((wire.TableKey(k, v), wire.TableValue(d)) for k, d, v in entries)
    return TableRequest(
        lambda rid, token: wire.UpdateTableEntries(rid, segment, token, items),
        wire.TableEntriesUpdated, lambda r: list(r.updated_versions),
    )  # fmt: skip


def remove_request(segment: str, keys: Sequence[tuple[bytes, int]]) -> TableRequest[None]:
    """Remove ``(key, expected version)`` keys, all or none (an absent key without a
    condition is no error)."""
    items = tuple(wire.TableKey(k, v) for k, v in keys)
    return TableRequest(
        lambda rid, token: wire.RemoveTableKeys(rid, segment, token, items),
        wire.TableKeysRemoved, _nothing,
    )  # fmt: skip


def get_request(segment: str, keys: Sequence[bytes]) -> TableRequest[list[TableEntry | None]]:
    items = tuple(wire.TableKey(k) for k in keys)
    return TableRequest(
        lambda rid, token: wire.ReadTable(rid, segment, token, items), wire.TableRead, _found
    )


def entries_request(
    segment: str, count: int, continuation: bytes = b"", *, keys_only: bool = False,
    from_key: bytes = b"", to_key: bytes = b"", prefix: bytes = b"",
) -> TableRequest[TablePage]:  # fmt: skip
    """Up to ``count`` entries in key order after ``continuation``, between ``from_key``
    and ``to_key`` (both included; empty: unbounded), starting with ``prefix``."""
    args = wire.TableIteratorArgs(continuation, prefix, from_key, to_key)
    if keys_only:
        return TableRequest(
            lambda rid, token: wire.ReadTableKeys(rid, segment, token, count, args),
            wire.TableKeysRead, _keys_page,
        )  # fmt: skip
    return TableRequest(
        lambda rid, token: wire.ReadTableEntries(rid, segment, token, count, args),
        wire.TableEntriesRead, _entries_page,
    )  # fmt: skip


def _nothing(reply: Any) -> None:
    return None


def _found(read: Any) -> list[TableEntry | None]:
    return [
        None if k.version == NOT_EXISTS else TableEntry(k.data, v.data, k.version)
        for k, v in read.entries
    ]


def _keys_page(found: Any) -> TablePage:
    listed = [TableEntry(k.data, b"", k.version) for k in found.keys]
    return TablePage(listed, found.continuation_token)


def _entries_page(read: Any) -> TablePage:
    page = [TableEntry(k.data, v.data, k.version) for k, v in read.entries]
    return TablePage(page, read.continuation_token)


class TableCalls:
    """The table commands over one asyncio connection (``SegmentCalls``)."""

    def __init__(self, calls: SegmentCalls) -> None:
        self.calls = calls

    async def run(self, request: TableRequest[T], *, token: str | None = None) -> T:
        reply: Any = await self.calls.call(
            lambda rid: request.make(rid, self.calls.token(token)), request.expected
        )
        return request.parse(reply)

    async def create(self, segment: str, *, token: str | None = None) -> None:
        await self.run(create_request(segment), token=token)

    async def delete(self, segment: str, *, must_be_empty: bool, token: str | None = None) -> None:
        await self.run(delete_request(segment, must_be_empty=must_be_empty), token=token)

    async def info(self, segment: str, *, token: str | None = None) -> tuple[int, int, int]:
        return await self.run(info_request(segment), token=token)

    async def update(
        self, segment: str, entries: Sequence[tuple[bytes, bytes, int]], *,
        token: str | None = None,
    ) -> list[int]:  # fmt: skip
        return await self.run(update_request(segment, entries), token=token)

    async def remove(
        self, segment: str, keys: Sequence[tuple[bytes, int]], *, token: str | None = None
    ) -> None:
        await self.run(remove_request(segment, keys), token=token)

    async def get(
        self, segment: str, keys: Sequence[bytes], *, token: str | None = None
    ) -> list[TableEntry | None]:
        return await self.run(get_request(segment, keys), token=token)

    async def entries(
        self, segment: str, count: int, continuation: bytes = b"", *, keys_only: bool = False,
        from_key: bytes = b"", to_key: bytes = b"", prefix: bytes = b"",
        token: str | None = None,
    ) -> TablePage:  # fmt: skip
        request = entries_request(
            segment, count, continuation, keys_only=keys_only, from_key=from_key, to_key=to_key,
            prefix=prefix,
        )  # fmt: skip
        return await self.run(request, token=token)
