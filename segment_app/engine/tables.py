"""Table segments: key/value entries with versions, kept in an ordinary segment.

Responsibility: ``TableSegments`` serves Pravega's table operations (create, update and remove
with version conditions, read keys, iterate keys and entries, the delta iteration the Rust
client's synchronizer uses, delete) over the ``SegmentStore``. A table segment is an ordinary
segment, so it is exactly as durable and as fenced as any other: its entries are appended to it,
through the container's durable log, and a node that lost its container cannot append.

* **Layout.** Each entry is ``kind (1 byte: put or remove), key length (4), value length (4),
  key, value``, appended to the segment; a batch of entries is one append (all or nothing). An
  entry's *version* is its offset in the segment, so versions only grow, per table.
* **Index.** The node that serves the container keeps each opened table's live entries in memory
  (key -> version and value, plus the keys in order and the versions in order); it builds it on
  first use by reading the segment from its start offset, which is the recovery after a crash, a
  restart or a move of the container. A table's live entries must therefore fit in the node's
  memory (ADR 0008).
* **Conditions.** An update is checked against the newest versions, queued ones included, and
  queued in the same step (no other change of the table runs in between), so conditional
  updates of one table are serialized. The changes of a table queued during one event-loop turn
  go to the container's durable log as one append (with the segment's expected length), whose
  durability the container's group commit shares with other segments; each change is answered
  once that append is durable and in the index. ``update_nowait`` does all of this without a
  task of its own (the wire server's path). Reads and iterations see durable entries only. An
  append that fails drops the index (the next use rebuilds it from the segment).
* **Compaction.** Once superseded entries are more than half of a table's bytes (and the table
  spans at least ``compact_min_bytes``), the live entries of its older half are copied to the
  tail and the segment is truncated where that half ends (an entry's start); a copied entry gets
  a new version (its new offset), as in Pravega, which also compacts from the head.
* **Iteration.** Keys and entries are iterated in key order with a continuation token (the
  last key returned), so a key present for the whole iteration is returned exactly once,
  whatever changes meanwhile; the delta iteration goes in version order from a position.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
import uuid
from collections.abc import Sequence
from typing import Any

from sortedcontainers import SortedDict, SortedList

from millrace.kernel.wire import KEY_NO_VERSION, KEY_NOT_EXISTS
from segment_app.engine.api import AttributeUpdate, SegmentStoreAPI
from segment_app.engine.errors import (
    BadOffsetError,
    InvalidArgumentError,
    InvariantError,
    SegmentExistsError,
    TableKeyBadVersionError,
    TableKeyDoesNotExistError,
    TableSegmentNotEmptyError,
)

__all__ = [
    "KEY_BYTES_MAX",
    "KEY_NOT_EXISTS",
    "KEY_NO_VERSION",
    "TABLE_ATTRIBUTE",
    "VALUE_BYTES_MAX",
    "TableEntry",
    "TableSegments",
]

log = logging.getLogger(__name__)

#: Largest key and value (Pravega's limits).
KEY_BYTES_MAX = 8192
VALUE_BYTES_MAX = 1024 * 1024 - KEY_BYTES_MAX
#: The attribute that marks a segment as a table segment (its value: the layout, 1).
TABLE_ATTRIBUTE = uuid.UUID("6d696c6c-7261-6365-7461-626c65736567")
_LAYOUT = 1
_PUT, _REMOVE = 1, 2
_HEADER = struct.Struct(">BII")
#: Bytes read at a time while rebuilding an index.
_SCAN_BYTES = 1 << 20
#: Bytes per append while compacting.
_COPY_BYTES = 1 << 20
_TOKEN_MARK = b"k"


#: A change's future, its entries as written (kind, key, value, version, size) and its versions.
_Waiter = tuple["asyncio.Future[list[int]]", list[tuple[int, bytes, bytes, int, int]], list[int]]


@dataclasses.dataclass(frozen=True, slots=True)
class TableEntry:
    key: bytes
    value: bytes
    version: int


@dataclasses.dataclass(slots=True)
class _Live:
    version: int
    value: bytes
    size: int  # the entry's bytes in the segment


class _Table:
    """One table's index on this node (see the module docstring)."""

    def __init__(self, container: object, start: int) -> None:
        self.container = container
        self.live: dict[bytes, _Live] = {}
        self.keys: SortedList = SortedList()
        self.order: SortedDict = SortedDict()  # version -> key, live entries only
        #: key -> (version, removed) of its newest entry queued and not yet durable.
        self.queued: dict[bytes, tuple[int, bool]] = {}
        self.inflight: set[asyncio.Future[Any]] = set()
        #: Entries queued this event-loop turn, appended together (``TableSegments._flush``),
        #: and the changes waiting for that append.
        self.batch: list[bytes] = []
        self.waiters: list[_Waiter] = []
        self.start = start
        self.tail = start
        self.live_bytes = 0
        self.lock = asyncio.Lock()
        self.compacting = False

    def version_of(self, key: bytes) -> int | None:
        """The newest version of ``key``, queued entries included (None: absent)."""
        queued = self.queued.get(key)
        if queued is not None:
            return None if queued[1] else queued[0]
        found = self.live.get(key)
        return None if found is None else found.version

    def apply(self, kind: int, key: bytes, value: bytes, version: int, size: int) -> None:
        """A durable entry: it supersedes the key's older one."""
        old = self.live.get(key)
        if old is not None:
            if old.version >= version:
                return
            del self.order[old.version]
            self.live_bytes -= old.size
        if kind == _PUT:
            if old is None:
                self.keys.add(key)
            self.live[key] = _Live(version, value, size)
            self.order[version] = key
            self.live_bytes += size
        elif old is not None:
            del self.live[key]
            self.keys.remove(key)
        queued = self.queued.get(key)
        if queued is not None and queued[0] == version:
            del self.queued[key]


def _encode(kind: int, key: bytes, value: bytes) -> bytes:
    return _HEADER.pack(kind, len(key), len(value)) + key + value


def _check_version(table: _Table, key: bytes, expected: int, segment: str) -> None:
    if expected == KEY_NO_VERSION:
        return
    current = table.version_of(key)
    if expected == KEY_NOT_EXISTS:
        if current is not None:
            raise TableKeyBadVersionError(
                f"key exists (version {current}); expected it absent", segment=segment
            )
        return
    if current is None:
        raise TableKeyDoesNotExistError(
            f"key does not exist; expected version {expected}", segment=segment
        )
    if current != expected:
        raise TableKeyBadVersionError(
            f"key is at version {current}; expected {expected}", segment=segment
        )


def _puts(
    entries: Sequence[tuple[bytes, bytes, int]], segment: str
) -> list[tuple[int, bytes, bytes, int]]:
    for key, value, _ in entries:
        _check_key(key, segment)
        if len(value) > VALUE_BYTES_MAX:
            raise InvalidArgumentError(
                f"a table value of {len(value)} bytes is over {VALUE_BYTES_MAX}", segment=segment
            )
    return [(_PUT, key, value, expected) for key, value, expected in entries]


def _check_key(key: bytes, segment: str) -> None:
    if not key:
        raise InvalidArgumentError("a table key must not be empty", segment=segment)
    if len(key) > KEY_BYTES_MAX:
        raise InvalidArgumentError(
            f"a table key of {len(key)} bytes is over {KEY_BYTES_MAX}", segment=segment
        )


def _found(table: _Table, keys: Sequence[bytes]) -> list[TableEntry | None]:
    """The live entries of ``keys`` (None for a key the table does not hold)."""
    out: list[TableEntry | None] = []
    for key in keys:
        found = table.live.get(key)
        out.append(None if found is None else TableEntry(key, found.value, found.version))
    return out


class TableSegments:
    def __init__(
        self,
        store: SegmentStoreAPI,
        *,
        compact_min_bytes: int = 4 << 20,
        check_versions: bool = True,
    ) -> None:
        self.store = store
        self.compact_min_bytes = compact_min_bytes
        #: TEST-ONLY switch (``no-table-versions``): without it, conditions are not checked.
        self.check_versions = check_versions
        self._tables: dict[str, _Table] = {}
        self._opening: dict[str, asyncio.Future[_Table]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle of a table ---------------------------------------------------------------

    async def create(self, name: str) -> None:
        """Create the table segment. Raises SegmentExistsError if it exists (an unmarked empty
        segment left by a create that crashed half-way is marked first)."""
        try:
            await self.store.create_segment(name)
        except SegmentExistsError:
            marks = await self.store.get_attributes(name, [TABLE_ATTRIBUTE])
            info = await self.store.get_info(name)
            if marks[TABLE_ATTRIBUTE] != _LAYOUT and info.length == 0:
                await self._mark(name)
            raise
        await self._mark(name)

    async def _mark(self, name: str) -> None:
        await self.store.update_attributes(name, [AttributeUpdate(TABLE_ATTRIBUTE, _LAYOUT)])

    async def is_table(self, name: str) -> bool:
        marks = await self.store.get_attributes(name, [TABLE_ATTRIBUTE])
        return marks[TABLE_ATTRIBUTE] == _LAYOUT

    async def refuse_table(self, name: str) -> None:
        """Raise InvalidArgumentError if ``name`` is a table segment (plain appends, seals and
        truncations would corrupt or bypass its index)."""
        if await self.is_table(name):
            raise InvalidArgumentError(
                "a table segment is changed by table commands only", segment=name
            )

    def forget(self, name: str) -> None:
        """Drop the index of ``name`` (deleted by a plain DeleteSegment)."""
        self._tables.pop(name, None)

    async def delete(self, name: str, *, must_be_empty: bool) -> None:
        table = await self._open(name)
        if must_be_empty and table.live:
            raise TableSegmentNotEmptyError(
                f"the table holds {len(table.live)} entries", segment=name
            )
        await self.store.delete(name)
        self._forget(name, table)

    async def info(self, name: str) -> tuple[int, int, int]:
        """(start offset, length, entry count)."""
        table = await self._open(name)
        return table.start, table.tail, len(table.live)

    # -- changes --------------------------------------------------------------------------

    async def update(
        self, name: str, entries: Sequence[tuple[bytes, bytes, int]], table_offset: int = -1
    ) -> list[int]:
        """Put ``(key, value, expected version)`` entries, all or none; their new versions."""
        return await self._change(name, _puts(entries, name), table_offset, skip_absent=False)

    def update_nowait(
        self, name: str, entries: Sequence[tuple[bytes, bytes, int]], table_offset: int = -1
    ) -> asyncio.Future[list[int]] | None:
        """``update`` without a task: checked and queued now, the future of its versions; None
        when the table's index is not ready here (not opened yet on this container, or held by
        a compaction), for the caller to use ``update`` instead. Raises what ``update`` raises
        on a refused condition."""
        table = self._tables.get(name)
        if (
            table is None
            or table.lock.locked()
            or table.container is not self.store.container(name)
        ):
            return None
        return self._submit(name, table, _puts(entries, name), table_offset, skip_absent=False)

    async def remove(
        self, name: str, keys: Sequence[tuple[bytes, int]], table_offset: int = -1
    ) -> None:
        """Remove ``(key, expected version)`` keys, all or none. Removing an absent key without
        a condition does nothing."""
        for key, _ in keys:
            _check_key(key, name)
        changes = [(_REMOVE, k, b"", e) for k, e in keys]
        await self._change(name, changes, table_offset, skip_absent=True)

    async def _change(
        self,
        name: str,
        changes: list[tuple[int, bytes, bytes, int]],
        table_offset: int,
        *,
        skip_absent: bool,
    ) -> list[int]:
        """``_submit`` with the table opened and no compaction under way; the versions."""
        table = await self._open(name)
        async with table.lock:
            done = self._submit(name, table, changes, table_offset, skip_absent=skip_absent)
        return await done

    def _submit(
        self,
        name: str,
        table: _Table,
        changes: list[tuple[int, bytes, bytes, int]],
        table_offset: int,
        *,
        skip_absent: bool,
    ) -> asyncio.Future[list[int]]:
        """Check ``changes`` against the table and queue them (the caller holds the table, so
        nothing runs between the check and the queueing); the future of their versions, set
        once they are durable and in the index."""
        if table_offset not in (-1, table.tail):
            raise BadOffsetError(
                f"the table is {table.tail} bytes long, not {table_offset}",
                segment=name,
                length=table.tail,
            )
        # Every condition is checked against the table as it was before the batch (a key may
        # appear more than once in a batch: Pravega's clients send a map's lock key with each
        # of its entries); the last entry of a key wins.
        if self.check_versions:
            for _, key, _, expected in changes:
                _check_version(table, key, expected, name)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[list[int]] = loop.create_future()
        parts: list[bytes] = []
        written: list[tuple[int, bytes, bytes, int, int]] = []
        versions: list[int] = []
        offset = table.tail
        for kind, key, value, _ in changes:
            if kind == _REMOVE and skip_absent and table.version_of(key) is None:
                versions.append(-1)
                continue
            data = _encode(kind, key, value)
            parts.append(data)
            written.append((kind, key, value, offset, len(data)))
            versions.append(offset)
            offset += len(data)
        if not parts:
            waiter.set_result(versions)
            return waiter
        for kind, key, _, version, _ in written:
            table.queued[key] = (version, kind == _REMOVE)
        if not table.waiters:
            loop.call_soon(self._flush, name, table, table.tail)
        table.waiters.append((waiter, written, versions))
        table.batch.extend(parts)
        table.tail = offset
        return waiter

    def _flush(self, name: str, table: _Table, at: int) -> None:
        """Append the changes queued for the table since the last turn as one append."""
        waiters, table.waiters = table.waiters, []
        data, table.batch = b"".join(table.batch), []
        appended = self.store.append_nowait(name, data, expected_offset=at)
        table.inflight.add(appended)
        appended.add_done_callback(lambda appended: self._appended(name, table, appended, waiters))

    def _appended(
        self, name: str, table: _Table, appended: asyncio.Future[Any], waiters: list[_Waiter]
    ) -> None:
        table.inflight.discard(appended)
        error = None if appended.cancelled() else appended.exception()
        if error is None and not appended.cancelled():
            for _, written, _ in waiters:
                for kind, key, value, version, size in written:
                    table.apply(kind, key, value, version, size)
        else:
            self._forget(name, table)  # (the next use rebuilds the index from the segment)
        for waiter, _, versions in waiters:
            if waiter.done():
                continue
            if error is not None:
                waiter.set_exception(error)
            elif appended.cancelled():
                waiter.cancel()
            else:
                waiter.set_result(versions)
        if error is None:
            self._maybe_compact(name, table)

    # -- reads ----------------------------------------------------------------------------

    async def get(self, name: str, keys: Sequence[bytes]) -> list[TableEntry | None]:
        return _found(await self._open(name), keys)

    def get_now(self, name: str, keys: Sequence[bytes]) -> list[TableEntry | None] | None:
        """``get`` without awaiting: the entries when the table's index is ready here, else
        None (not opened yet on this container: the caller uses ``get``)."""
        table = self._tables.get(name)
        if table is None or table.container is not self.store.container(name):
            return None
        return _found(table, keys)

    async def entries(
        self,
        name: str,
        token: bytes,
        count: int,
        max_bytes: int = 8 << 20,
        *,
        from_key: bytes = b"",
        to_key: bytes = b"",
        prefix: bytes = b"",
    ) -> tuple[list[TableEntry], bytes]:
        """Up to ``count`` entries (and about ``max_bytes``) in key order after the
        continuation ``token`` (empty: from the start), only keys from ``from_key`` to
        ``to_key`` (both included, empty: unbounded) that start with ``prefix``; the token to
        go on with (unchanged when nothing is left)."""
        table = await self._open(name)
        after = _parse_token(token, name)
        low = max(from_key, prefix)
        found: list[TableEntry] = []
        size = 0
        if after and after >= low:
            keys = table.keys.irange(minimum=after, inclusive=(False, True))
        else:
            keys = table.keys.irange(minimum=low) if low else table.keys
        for key in keys:
            if (to_key and key > to_key) or not key.startswith(prefix):
                break
            if found and (len(found) >= count or size >= max_bytes):
                break
            live = table.live[key]
            found.append(TableEntry(key, live.value, live.version))
            size += live.size
        return found, (_TOKEN_MARK + found[-1].key) if found else token

    async def delta(
        self, name: str, from_position: int, count: int, max_bytes: int = 8 << 20
    ) -> tuple[list[TableEntry], bool, bool, int]:
        """Up to ``count`` live entries in version order from ``from_position``: (entries,
        should clear: the position was compacted away, reached end, the position to go on
        from)."""
        table = await self._open(name)
        if from_position < 0:
            raise InvalidArgumentError(f"negative position {from_position}", segment=name)
        should_clear = 0 < from_position < table.start
        found: list[TableEntry] = []
        last = max(from_position, table.start) if from_position else from_position
        size = 0
        for version in table.order.irange(minimum=from_position):
            if found and (len(found) >= count or size >= max_bytes):
                break
            key = table.order[version]
            live = table.live[key]
            found.append(TableEntry(key, live.value, version))
            last = version + live.size
            size += live.size
        reached_end = not found or table.order.bisect_left(last) >= len(table.order)
        return found, should_clear, reached_end, last

    # -- the index ------------------------------------------------------------------------

    async def _open(self, name: str) -> _Table:
        """The table's index, built from the segment on first use or after its container
        changed (restarted, moved away and back)."""
        container = self.store.container(name)
        table = self._tables.get(name)
        if table is not None and table.container is container:
            return table
        opening = self._opening.get(name)
        if opening is None:
            opening = asyncio.get_running_loop().create_future()
            self._opening[name] = opening
            try:
                table = await self._load(name, container)
            except BaseException as exc:
                opening.set_exception(exc)
                opening.exception()  # (retrieved: the waiters, if any, get it too)
                raise
            else:
                self._tables[name] = table
                opening.set_result(table)
            finally:
                self._opening.pop(name, None)
            return table
        return await asyncio.shield(opening)

    async def _load(self, name: str, container: object) -> _Table:
        if not await self.is_table(name):
            raise InvalidArgumentError("not a table segment", segment=name)
        info = await self.store.get_info(name)
        table = _Table(container, info.start_offset)
        offset, buffer = info.start_offset, b""
        while offset < info.length:
            read = await self.store.read(name, offset, min(_SCAN_BYTES, info.length - offset))
            if not read.data:
                break
            buffer += read.data
            offset += len(read.data)
            buffer = self._scan(name, table, buffer, offset - len(buffer))
        if buffer or offset != info.length:
            raise InvariantError(
                f"table segment ends with a partial entry at {offset - len(buffer)}", segment=name
            )
        table.tail = info.length
        log.debug("table %s: %d entries from %d bytes", name, len(table.live), info.length)
        return table

    @staticmethod
    def _scan(name: str, table: _Table, buffer: bytes, at: int) -> bytes:
        """Apply the whole entries of ``buffer`` (which starts at offset ``at``); the rest."""
        pos = 0
        while len(buffer) - pos >= _HEADER.size:
            kind, key_len, value_len = _HEADER.unpack_from(buffer, pos)
            if kind not in (_PUT, _REMOVE) or key_len > KEY_BYTES_MAX:
                raise InvariantError(f"not a table entry at offset {at + pos}", segment=name)
            size = _HEADER.size + key_len + value_len
            if len(buffer) - pos < size:
                break
            start = pos + _HEADER.size
            key = buffer[start : start + key_len]
            value = buffer[start + key_len : pos + size]
            table.apply(kind, key, value, at + pos, size)
            pos += size
        return buffer[pos:]

    def _forget(self, name: str, table: _Table) -> None:
        if self._tables.get(name) is table:
            del self._tables[name]

    # -- compaction -------------------------------------------------------------------------

    def _maybe_compact(self, name: str, table: _Table) -> None:
        span = table.tail - table.start
        if table.compacting or span < self.compact_min_bytes or table.live_bytes * 2 > span:
            return
        table.compacting = True
        task = asyncio.get_running_loop().create_task(self._compact(name, table))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _compact(self, name: str, table: _Table) -> None:
        try:
            await self.compact(name, table)
        except Exception as exc:  # the index is rebuilt on the next use; compaction is retried
            log.warning("compaction of table %s failed: %s", name, exc)
        finally:
            table.compacting = False

    async def compact(self, name: str, table: _Table | None = None) -> int:
        """Copy the live entries of the table's older half to the tail and truncate before
        the rest; the new start offset. The older half holds the entries most likely
        superseded, so little is copied for what is freed."""
        table = table or await self._open(name)
        async with table.lock:
            if table.waiters:
                await asyncio.sleep(0)  # (its ``_flush``, already scheduled, runs first)
            if table.inflight:
                await asyncio.wait(list(table.inflight))
            if self._tables.get(name) is not table:
                return table.start  # an append failed meanwhile: the next use rebuilds
            # The cut is an entry's start: the first live entry past the middle (or the tail).
            middle = table.start + (table.tail - table.start) // 2
            later = table.order.irange(minimum=middle)
            cut = next(iter(later), table.tail)
            batches: list[list[tuple[bytes, bytes, int, int]]] = [[]]
            size, offset = 0, table.tail
            for version in list(table.order.irange(maximum=cut, inclusive=(True, False))):
                key = table.order[version]
                live = table.live[key]
                data_size = _HEADER.size + len(key) + len(live.value)
                if size and size + data_size > _COPY_BYTES:
                    batches.append([])
                    size = 0
                batches[-1].append((key, live.value, offset, data_size))
                size += data_size
                offset += data_size
            for batch in batches:
                if not batch:
                    continue
                data = b"".join(_encode(_PUT, k, v) for k, v, _, _ in batch)
                try:
                    await self.store.append(name, data, expected_offset=table.tail)
                except BaseException:
                    self._forget(name, table)
                    raise
                table.tail += len(data)
                for key, value, version, data_size in batch:
                    table.apply(_PUT, key, value, version, data_size)
            await self.store.truncate(name, cut)
            table.start = cut
            log.info("table %s compacted: %d live entries from offset %d", name, len(table.live),
                     cut)  # fmt: skip
            return cut

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def _parse_token(token: bytes, name: str) -> bytes:
    if not token:
        return b""
    if not token.startswith(_TOKEN_MARK) or len(token) == 1:
        raise InvalidArgumentError("not a continuation token of this table", segment=name)
    return token[1:]
