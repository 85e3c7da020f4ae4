"""Request/response commands of the wire server: each request in, one reply out.

Responsibility: authorize each request, call the segment store, and build the success reply.
Handlers raise engine errors, ``AuthError`` or ``UnsupportedOperationError``; the connection turns
those into error replies through ``segment_app.server.replies``. Appends (SetupAppend and the
append blocks) are per-connection state and live in ``segment_app.server.appends``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from millrace.kernel import wire as wire
from millrace.kernel.claims import READ, READ_UPDATE
from segment_app.engine.api import AttributeUpdate, SegmentStoreAPI
from segment_app.engine.errors import BadAttributeUpdateError, InvalidArgumentError
from segment_app.engine.tables import TableEntry, TableSegments
from segment_app.server.auth import Authorizer
from segment_app.server.locate import EventLocator
from segment_app.server.quotas import ScopeThrottles
from segment_app.server.replies import UnsupportedOperationError

__all__ = ["MERGE_ATTRIBUTE_UPDATES_UNSUPPORTED", "Pending", "RequestHandlers", "RequestSettings"]

MERGE_ATTRIBUTE_UPDATES_UNSUPPORTED = "MergeSegments with attribute updates"
#: Java's minimum read size (the size of an event header).
_READ_BYTES_MIN = 8
#: Most entries or keys in one table read reply, whatever the client suggests.
TABLE_READ_COUNT_MAX = 10_000

Handler = Callable[[Any], Awaitable[object]]
#: A request queued without a task: the future of its outcome, and the reply made of it.
Pending = tuple["asyncio.Future[Any]", Callable[[Any], object]]


@dataclasses.dataclass(frozen=True, slots=True)
class RequestSettings:
    """What the handlers need from the server configuration."""

    #: How long a read at the tail of an open segment waits for data before answering empty.
    read_tail_wait_seconds: float
    #: Most bytes in one SegmentRead reply.
    read_reply_bytes_max: int


class RequestHandlers:
    """The request/response commands, by type code (``handlers``)."""

    def __init__(
        self,
        store: SegmentStoreAPI,
        authorizer: Authorizer,
        settings: RequestSettings,
        tables: TableSegments | None = None,
    ) -> None:
        self.store = store
        self.auth = authorizer
        self.settings = settings
        self.locator = EventLocator(store)
        self.tables = tables or TableSegments(store)
        #: Scopes' quotas (read rates), set by a node with a quota source.
        self.quotas: ScopeThrottles | None = None
        self.handlers: dict[int, Handler] = {
            wire.ReadSegment.TYPE: self.read_segment,
            wire.GetStreamSegmentInfo.TYPE: self.get_info,
            wire.CreateSegment.TYPE: self.create_segment,
            wire.SealSegment.TYPE: self.seal_segment,
            wire.TruncateSegment.TYPE: self.truncate_segment,
            wire.DeleteSegment.TYPE: self.delete_segment,
            wire.MergeSegments.TYPE: self.merge_segments,
            wire.MergeSegmentsBatch.TYPE: self.merge_segments_batch,
            wire.GetSegmentAttribute.TYPE: self.get_attribute,
            wire.UpdateSegmentAttribute.TYPE: self.update_attribute,
            wire.UpdateSegmentPolicy.TYPE: self.update_policy,
            wire.CreateTransientSegment.TYPE: self.create_transient_segment,
            wire.LocateOffset.TYPE: self.locate_offset,
            wire.CreateTableSegment.TYPE: self.create_table,
            wire.DeleteTableSegment.TYPE: self.delete_table,
            wire.GetTableSegmentInfo.TYPE: self.table_info,
            wire.UpdateTableEntries.TYPE: self.update_table,
            wire.RemoveTableKeys.TYPE: self.remove_table_keys,
            wire.ReadTable.TYPE: self.read_table,
            wire.ReadTableKeys.TYPE: self.read_table_keys,
            wire.ReadTableEntries.TYPE: self.read_table_entries,
            wire.ReadTableEntriesDelta.TYPE: self.read_table_delta,
        }
        #: Requests that can be answered without a task of their own, by type code: the handler
        #: checks and queues the request at once and gives back the future of its outcome and
        #: how to make the reply of it, or None when it cannot (then ``handlers`` serves it).
        self.immediate: dict[int, Callable[[Any], Pending | None]] = {
            wire.UpdateTableEntries.TYPE: self.update_table_now,
            wire.ReadTable.TYPE: self.read_table_now,
        }

    def authorize(self, token: str, segment: str, access: str) -> None:
        self.auth.check(token, segment, access)

    async def read_segment(self, cmd: wire.ReadSegment) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ)
        _check_offset(cmd.offset, cmd.segment)
        length = min(self.settings.read_reply_bytes_max, max(_READ_BYTES_MIN, cmd.suggested_length))
        result = await self.store.read(
            cmd.segment, cmd.offset, length, wait_seconds=self.settings.read_tail_wait_seconds
        )
        quotas = self.quotas
        if quotas is not None:  # over the scope's read rate: the reply waits
            delay = quotas.charge_read(cmd.segment, len(result.data))
            if delay > 0:
                await asyncio.sleep(delay)
        return wire.SegmentRead(
            cmd.segment,
            cmd.offset,
            result.at_tail,
            result.end_of_segment,
            result.data,
            cmd.request_id,
        )

    async def get_info(self, cmd: wire.GetStreamSegmentInfo) -> object:
        self.authorize(cmd.delegation_token, cmd.segment_name, READ)
        info = await self.store.get_info(cmd.segment_name)
        return wire.StreamSegmentInfo(
            cmd.request_id,
            cmd.segment_name,
            info.exists,
            info.sealed,
            info.deleted,
            info.last_modified_ms,
            info.length,
            info.start_offset,
        )

    async def locate_offset(self, cmd: wire.LocateOffset) -> object:
        """The first event boundary at or after the target offset (``EventLocator``)."""
        self.authorize(cmd.delegation_token, cmd.segment, READ)
        _check_offset(cmd.target_offset, cmd.segment)
        offset = await self.locator.locate(cmd.segment, cmd.target_offset)
        return wire.OffsetLocated(cmd.request_id, cmd.segment, offset)

    async def create_segment(self, cmd: wire.CreateSegment) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
        await self.store.create_segment(cmd.segment)
        return wire.SegmentCreated(cmd.request_id, cmd.segment)

    async def seal_segment(self, cmd: wire.SealSegment) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
        await self.tables.refuse_table(cmd.segment)
        await self.store.seal(cmd.segment)
        return wire.SegmentSealed(cmd.request_id, cmd.segment)

    async def truncate_segment(self, cmd: wire.TruncateSegment) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
        await self.tables.refuse_table(cmd.segment)
        _check_offset(cmd.truncation_offset, cmd.segment)
        await self.store.truncate(cmd.segment, cmd.truncation_offset)
        return wire.SegmentTruncated(cmd.request_id, cmd.segment)

    async def delete_segment(self, cmd: wire.DeleteSegment) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
        await self.store.delete(cmd.segment)
        self.locator.forget(cmd.segment)
        self.tables.forget(cmd.segment)
        return wire.SegmentDeleted(cmd.request_id, cmd.segment)

    async def merge_segments(self, cmd: wire.MergeSegments) -> object:
        self.authorize(cmd.delegation_token, cmd.target, READ_UPDATE)
        self.authorize(cmd.delegation_token, cmd.source, READ_UPDATE)
        if cmd.attribute_updates:
            raise UnsupportedOperationError(MERGE_ATTRIBUTE_UPDATES_UNSUPPORTED)
        length = await self.store.merge(cmd.target, cmd.source)
        return wire.SegmentsMerged(cmd.request_id, cmd.target, cmd.source, length)

    async def merge_segments_batch(self, cmd: wire.MergeSegmentsBatch) -> object:
        """Merges the sources one after the other (not atomically, as in Pravega)."""
        target = cmd.target_segment_id
        for name in (target, *cmd.source_segment_ids):
            self.authorize(cmd.delegation_token, name, READ_UPDATE)
        merged = []
        for source in cmd.source_segment_ids:
            merged.append((source, await self.store.merge(target, source)))
        return wire.SegmentsBatchMerged(cmd.request_id, target, tuple(merged))

    async def get_attribute(self, cmd: wire.GetSegmentAttribute) -> object:
        self.authorize(cmd.delegation_token, cmd.segment_name, READ)
        values = await self.store.get_attributes(cmd.segment_name, [cmd.attribute_id])
        return wire.SegmentAttribute(cmd.request_id, values[cmd.attribute_id])

    async def update_attribute(self, cmd: wire.UpdateSegmentAttribute) -> object:
        self.authorize(cmd.delegation_token, cmd.segment_name, READ_UPDATE)
        update = AttributeUpdate(cmd.attribute_id, cmd.new_value, cmd.expected_value)
        try:
            await self.store.update_attributes(cmd.segment_name, [update])
        except BadAttributeUpdateError:
            return wire.SegmentAttributeUpdated(cmd.request_id, False)
        return wire.SegmentAttributeUpdated(cmd.request_id, True)

    async def update_policy(self, cmd: wire.UpdateSegmentPolicy) -> object:
        """Scaling policies live in the controller; the segment only has to exist."""
        self.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
        await self.store.get_info(cmd.segment)
        return wire.SegmentPolicyUpdated(cmd.request_id, cmd.segment)

    async def create_transient_segment(self, cmd: wire.CreateTransientSegment) -> object:
        self.authorize(cmd.delegation_token, cmd.parent_segment, READ_UPDATE)
        await self.store.get_info(cmd.parent_segment)
        name = f"{cmd.parent_segment}#transient.{cmd.writer_id.hex}.{uuid.uuid4().hex}"
        await self.store.create_segment(name)
        return wire.SegmentCreated(cmd.request_id, name)

    # -- table segments ---------------------------------------------------------------------

    async def create_table(self, cmd: wire.CreateTableSegment) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
        await self.tables.create(cmd.segment)
        return wire.SegmentCreated(cmd.request_id, cmd.segment)

    async def delete_table(self, cmd: wire.DeleteTableSegment) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
        await self.tables.delete(cmd.segment, must_be_empty=cmd.must_be_empty)
        return wire.SegmentDeleted(cmd.request_id, cmd.segment)

    async def table_info(self, cmd: wire.GetTableSegmentInfo) -> object:
        self.authorize(cmd.delegation_token, cmd.segment_name, READ)
        start, length, count = await self.tables.info(cmd.segment_name)
        return wire.TableSegmentInfo(cmd.request_id, cmd.segment_name, start, length, count, 0)

    async def update_table(self, cmd: wire.UpdateTableEntries) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
        entries = [(k.data, v.data, k.version) for k, v in cmd.table_entries]
        versions = await self.tables.update(cmd.segment, entries, cmd.table_segment_offset)
        return wire.TableEntriesUpdated(cmd.request_id, tuple(versions))

    def update_table_now(self, cmd: wire.UpdateTableEntries) -> Pending | None:
        """``update_table`` without a task (see ``immediate``)."""
        self.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
        entries = [(k.data, v.data, k.version) for k, v in cmd.table_entries]
        done = self.tables.update_nowait(cmd.segment, entries, cmd.table_segment_offset)
        if done is None:
            return None
        request_id = cmd.request_id
        return done, lambda versions: wire.TableEntriesUpdated(request_id, tuple(versions))

    async def remove_table_keys(self, cmd: wire.RemoveTableKeys) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
        keys = [(k.data, k.version) for k in cmd.keys]
        await self.tables.remove(cmd.segment, keys, cmd.table_segment_offset)
        return wire.TableKeysRemoved(cmd.request_id, cmd.segment)

    async def read_table(self, cmd: wire.ReadTable) -> object:
        """Each requested key with its value and version; a missing one with version -1 and
        an empty value (as Pravega answers)."""
        self.authorize(cmd.delegation_token, cmd.segment, READ)
        return _table_read(cmd, await self.tables.get(cmd.segment, [k.data for k in cmd.keys]))

    def read_table_now(self, cmd: wire.ReadTable) -> Pending | None:
        """``read_table`` without a task, when the table's index is ready (see ``immediate``):
        the outcome is done already."""
        self.authorize(cmd.delegation_token, cmd.segment, READ)
        found = self.tables.get_now(cmd.segment, [k.data for k in cmd.keys])
        if found is None:
            return None
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        done.set_result(_table_read(cmd, found))
        return done, _same

    async def read_table_keys(self, cmd: wire.ReadTableKeys) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ)
        found, token = await self._iterate(cmd, cmd.suggested_key_count)
        keys = tuple(wire.TableKey(e.key, e.version) for e in found)
        return wire.TableKeysRead(cmd.request_id, cmd.segment, keys, token)

    async def read_table_entries(self, cmd: wire.ReadTableEntries) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ)
        found, token = await self._iterate(cmd, cmd.suggested_entry_count)
        entries = tuple(_wire_entry(e) for e in found)
        return wire.TableEntriesRead(cmd.request_id, cmd.segment, entries, token)

    async def _iterate(
        self, cmd: wire.ReadTableKeys | wire.ReadTableEntries, suggested: int
    ) -> tuple[list[TableEntry], bytes]:
        """The page a key or entry iteration asks for: its continuation token, its key range
        (from and to, both included) and its prefix filter."""
        args = cmd.args
        return await self.tables.entries(
            cmd.segment, args.continuation_token, _table_count(suggested),
            from_key=args.from_key, to_key=args.to_key, prefix=args.prefix_filter,
        )  # fmt: skip

    async def read_table_delta(self, cmd: wire.ReadTableEntriesDelta) -> object:
        self.authorize(cmd.delegation_token, cmd.segment, READ)
        found, clear, end, last = await self.tables.delta(
            cmd.segment, cmd.from_position, _table_count(cmd.suggested_entry_count)
        )
        entries = tuple(_wire_entry(e) for e in found)
        return wire.TableEntriesDeltaRead(cmd.request_id, cmd.segment, entries, clear, end, last)


def _wire_entry(entry: TableEntry) -> tuple[wire.TableKey, wire.TableValue]:
    return wire.TableKey(entry.key, entry.version), wire.TableValue(entry.value)


def _table_count(suggested: int) -> int:
    return min(max(1, suggested), TABLE_READ_COUNT_MAX)


def _check_offset(offset: int, segment: str) -> None:
    if offset < 0:
        raise InvalidArgumentError(f"negative offset {offset}", segment=segment)


def _same(reply: object) -> object:
    return reply


def _table_read(cmd: wire.ReadTable, found: list[TableEntry | None]) -> object:
    """The reply to ``cmd``: each requested key with its value and version; a missing one with
    version -1 and an empty value (as Pravega answers)."""
    entries = tuple(
        _wire_entry(e) if e is not None else
        (wire.TableKey(k.data, wire.KEY_NOT_EXISTS), wire.TableValue(b""))
        for k, e in zip(cmd.keys, found, strict=True)
    )  # fmt: skip
    return wire.TableRead(cmd.request_id, cmd.segment, entries)
