"""Table segments over the wire, as Pravega's clients use them: create, conditional updates and
removals by version, reads of keys, iteration with continuation tokens while entries change, the
delta iteration of the Rust client's synchronizer, compaction keeping every live entry, and the
version checks shown to matter by switching them off (TEST-ONLY ``check_versions``)."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

from millrace.kernel import wire as wire
from segment_app.engine.store import SegmentStore
from segment_app.server.server import SegmentStoreServer

TABLE = "sc/rg_kvtable/0.#epoch.0"
NO_VERSION = wire.KEY_NO_VERSION


class Wire:
    """One request at a time on a raw connection, as the Rust client's raw client does."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.next_id = 0

    async def ask(self, make: Any, *args: Any) -> Any:
        self.next_id += 1
        await self.raw.send(make(self.next_id, *args))
        reply = await self.raw.recv()
        assert reply.request_id == self.next_id
        return reply

    async def update(self, entries: list[tuple[bytes, bytes, int]], table: str = TABLE) -> Any:
        items = tuple((wire.TableKey(k, v), wire.TableValue(d)) for k, d, v in entries)
        return await self.ask(wire.UpdateTableEntries, table, "", items, -1)

    async def read(self, *keys: bytes) -> dict[bytes, tuple[bytes, int]]:
        reply = await self.ask(wire.ReadTable, TABLE, "", tuple(wire.TableKey(k) for k in keys))
        assert isinstance(reply, wire.TableRead), reply
        return {k.data: (v.data, k.version) for k, v in reply.entries}

    async def remove(self, keys: list[tuple[bytes, int]]) -> Any:
        return await self.ask(
            wire.RemoveTableKeys, TABLE, "", tuple(wire.TableKey(k, v) for k, v in keys), -1
        )

    async def page(self, token: bytes, count: int) -> Any:
        args = wire.TableIteratorArgs(token)
        reply = await self.ask(wire.ReadTableEntries, TABLE, "", count, args)
        assert isinstance(reply, wire.TableEntriesRead), reply
        return reply

    async def delta(self, position: int, count: int = 10) -> Any:
        reply = await self.ask(wire.ReadTableEntriesDelta, TABLE, "", position, count)
        assert isinstance(reply, wire.TableEntriesDeltaRead), reply
        return reply

    async def info(self) -> Any:
        reply = await self.ask(wire.GetTableSegmentInfo, TABLE, "")
        assert isinstance(reply, wire.TableSegmentInfo), reply
        return reply


async def _table(raw: Any) -> Wire:
    w = Wire(raw)
    assert isinstance(await w.ask(wire.CreateTableSegment, TABLE, ""), wire.SegmentCreated)
    return w


async def test_create_twice_answers_already_exists_and_missing_keys_read_as_version_minus_one(
    raw: Any,
) -> None:
    w = await _table(raw)
    assert isinstance(await w.ask(wire.CreateTableSegment, TABLE, ""), wire.SegmentAlreadyExists)
    assert await w.read(b"nope") == {b"nope": (b"", wire.KEY_NOT_EXISTS)}
    updated = await w.update([(b"a", b"1", NO_VERSION), (b"b", b"2", wire.KEY_NOT_EXISTS)])
    assert isinstance(updated, wire.TableEntriesUpdated)
    first, second = updated.updated_versions
    assert 0 <= first < second
    assert await w.read(b"a", b"b") == {b"a": (b"1", first), b"b": (b"2", second)}
    info = await w.info()
    assert (info.start_offset, info.entry_count) == (0, 2) and info.length > 0


async def test_conditions_are_checked_and_a_batch_is_all_or_nothing(raw: Any) -> None:
    w = await _table(raw)
    (version,) = (await w.update([(b"k", b"v1", wire.KEY_NOT_EXISTS)])).updated_versions
    again = await w.update([(b"k", b"x", wire.KEY_NOT_EXISTS)])
    assert isinstance(again, wire.TableKeyBadVersion)
    stale = await w.update([(b"fresh", b"f", NO_VERSION), (b"k", b"x", version + 1)])
    assert isinstance(stale, wire.TableKeyBadVersion)
    missing = await w.update([(b"ghost", b"g", 7)])
    assert isinstance(missing, wire.TableKeyDoesNotExist)
    found = await w.read(b"k", b"fresh")
    assert found == {b"k": (b"v1", version), b"fresh": (b"", wire.KEY_NOT_EXISTS)}
    (newer,) = (await w.update([(b"k", b"v2", version)])).updated_versions
    assert newer > version
    assert isinstance(await w.remove([(b"k", version)]), wire.TableKeyBadVersion)
    assert isinstance(await w.remove([(b"ghost", 3)]), wire.TableKeyDoesNotExist)
    assert isinstance(await w.remove([(b"ghost", NO_VERSION)]), wire.TableKeysRemoved)
    assert isinstance(await w.remove([(b"k", newer)]), wire.TableKeysRemoved)
    assert await w.read(b"k") == {b"k": (b"", wire.KEY_NOT_EXISTS)}


async def _increment(server: SegmentStoreServer, open_raw: Any, times: int) -> int:
    """Read-modify-write of one counter, retried on a bad version; the conflicts seen."""
    w = Wire(await open_raw(server.port))
    conflicts = 0
    try:
        for _ in range(times):
            while True:
                value, version = (await w.read(b"counter"))[b"counter"]
                count = int(value or b"0")
                reply = await w.update([(b"counter", str(count + 1).encode(), version)])
                if isinstance(reply, wire.TableEntriesUpdated):
                    break
                assert isinstance(reply, wire.TableKeyBadVersion), reply
                conflicts += 1
    finally:
        await w.raw.close()
    return conflicts


async def _count_with_concurrent_writers(
    server: SegmentStoreServer, raw: Any, open_raw: Any
) -> int:
    w = await _table(raw)
    await w.update([(b"counter", b"0", wire.KEY_NOT_EXISTS)])
    await asyncio.gather(*(_increment(server, open_raw, 40) for _ in range(5)))
    value, _ = (await w.read(b"counter"))[b"counter"]
    return int(value)


async def test_concurrent_writers_lose_no_increment(
    server: SegmentStoreServer, raw: Any, open_raw: Any
) -> None:
    assert await _count_with_concurrent_writers(server, raw, open_raw) == 200


async def test_without_the_version_checks_concurrent_writers_lose_increments(
    server: SegmentStoreServer, raw: Any, open_raw: Any
) -> None:
    """The guard switched off (TEST-ONLY): the same writers now overwrite each other."""
    server.tables.check_versions = False
    assert await _count_with_concurrent_writers(server, raw, open_raw) < 200


async def test_iteration_while_entries_change_returns_each_lasting_key_once(raw: Any) -> None:
    w = await _table(raw)
    rng = random.Random(7)
    keys = [f"key-{i:04d}".encode() for i in range(300)]
    for i in range(0, len(keys), 50):
        await w.update([(k, b"v0", NO_VERSION) for k in keys[i : i + 50]])
    seen: list[bytes] = []
    token = b""
    added = 0
    while True:
        reply = await w.page(token, 40)
        if not reply.entries:
            break
        seen += [k.data for k, _ in reply.entries]
        token = reply.continuation_token
        # Meanwhile: existing keys change (new versions) and new keys arrive.
        await w.update([(k, b"v1", NO_VERSION) for k in rng.sample(keys, 20)])
        await w.update([(f"new-{added}-{uuid.uuid4().hex[:6]}".encode(), b"n", NO_VERSION)])
        added += 1
    assert len([k for k in seen if k.startswith(b"key-")]) == len(keys)
    assert {k for k in seen if k.startswith(b"key-")} == set(keys)
    assert len(seen) == len(set(seen))
    keys_reply = await w.ask(wire.ReadTableKeys, TABLE, "", 5, wire.TableIteratorArgs())
    assert isinstance(keys_reply, wire.TableKeysRead) and len(keys_reply.keys) == 5


async def test_the_delta_iteration_gives_what_changed_since_a_position(raw: Any) -> None:
    w = await _table(raw)
    await w.update([(f"k{i}".encode(), b"a", NO_VERSION) for i in range(25)])
    position, got = 0, {}
    while True:
        reply = await w.delta(position)
        if not reply.entries:
            break
        got.update({k.data: v.data for k, v in reply.entries})
        assert reply.last_position > position
        position = reply.last_position
    assert got == {f"k{i}".encode(): b"a" for i in range(25)}
    assert (await w.delta(position)).entries == ()
    await w.update([(b"k3", b"b", NO_VERSION), (b"k30", b"c", NO_VERSION)])
    await w.remove([(b"k4", NO_VERSION)])
    reply = await w.delta(position)
    assert {k.data: v.data for k, v in reply.entries} == {b"k3": b"b", b"k30": b"c"}
    assert reply.reached_end and not reply.should_clear


async def test_compaction_keeps_every_live_entry_and_the_index_rebuilds_the_same(
    server: SegmentStoreServer, store: SegmentStore, raw: Any
) -> None:
    server.tables.compact_min_bytes = 32 * 1024
    w = await _table(raw)
    expected: dict[bytes, bytes] = {}
    for round_ in range(60):
        batch = [(f"hot-{i}".encode(), f"{round_}".encode() * 100, NO_VERSION) for i in range(8)]
        if round_ % 10 == 0:
            batch.append((f"cold-{round_}".encode(), b"c" * 200, NO_VERSION))
        await w.update(batch)
        expected.update({k: v for k, v, _ in batch})
    for _ in range(50):  # compaction runs in the background
        if (await w.info()).start_offset > 0:
            break
        await asyncio.sleep(0.05)
    info = await w.info()
    assert info.start_offset > 0 and info.entry_count == len(expected)
    assert info.length - info.start_offset < 60 * 8 * 300  # superseded entries are gone
    found = await w.read(*expected)
    assert {k: v for k, (v, _) in found.items()} == expected
    segment_info = await store.get_info(TABLE)
    assert segment_info.start_offset == info.start_offset
    server.tables.forget(TABLE)  # the next use rebuilds the index from the segment
    rebuilt = await w.read(*expected)
    assert rebuilt == found


async def test_compaction_copies_only_the_older_half(
    server: SegmentStoreServer, store: SegmentStore, raw: Any
) -> None:
    """Old entries still live are copied to the tail (new versions); the newest are left where
    they are (their versions unchanged), so a compaction copies little of a table whose writes
    keep superseding its oldest entries."""
    server.tables.compact_min_bytes = 64 * 1024
    w = await _table(raw)
    cold = {f"cold-{i}".encode(): b"c" * 100 for i in range(5)}
    await w.update([(k, v, NO_VERSION) for k, v in cold.items()])
    for round_ in range(200):  # 8 hot keys overwritten: superseded entries pile up
        await w.update([(f"hot-{i}".encode(), b"%d" % round_ * 100, NO_VERSION) for i in range(8)])
        if (await w.info()).start_offset > 0:
            break
    newest = await w.read(*(f"hot-{i}".encode() for i in range(8)))
    cold_before = await w.read(*cold)
    for _ in range(50):  # compaction runs in the background
        info = await w.info()
        if info.start_offset > 0 and not server.tables._tables[TABLE].compacting:
            break
        await asyncio.sleep(0.05)
    assert info.start_offset > 0
    cold_after = await w.read(*cold)
    assert {k: v for k, (v, _) in cold_after.items()} == cold  # every live entry kept ...
    assert all(cold_after[k][1] > cold_before[k][1] or cold_before[k][1] >= info.start_offset
               for k in cold)  # ... the old ones copied past the cut  # fmt: skip
    assert await w.read(*newest) == newest  # the newest not copied: versions unchanged
    assert info.length - info.start_offset < 2 * 64 * 1024


async def test_concurrent_updates_of_one_table_share_an_append_and_each_is_answered(
    server: SegmentStoreServer, store: SegmentStore, raw: Any, open_raw: Any
) -> None:
    """Updates from many connections in one event-loop turn go to the durable log as one append;
    each still gets its own versions, conditions included (one of two racing creates loses)."""
    w = await _table(raw)
    await w.update([(b"warm", b"up", NO_VERSION)])  # (the index is open: no task is needed)
    others = [Wire(await open_raw(server.port)) for _ in range(14)]
    appends: list[int] = []
    real_append = store.append_nowait

    def counting(name: str, data: Any, **kwargs: Any) -> Any:
        appends.append(len(data))
        return real_append(name, data, **kwargs)

    store.append_nowait = counting  # type: ignore[method-assign]
    try:
        replies = await asyncio.gather(
            *(o.update([(f"k{n}".encode(), b"v%d" % n, NO_VERSION)]) for n, o in
              enumerate(others[:12])),
            others[12].update([(b"race", b"a", wire.KEY_NOT_EXISTS)]),
            others[13].update([(b"race", b"b", wire.KEY_NOT_EXISTS)]),
        )  # fmt: skip
    finally:
        store.append_nowait = real_append  # type: ignore[method-assign]
        for other in others:
            await other.raw.close()
    versions = [r.updated_versions[0] for r in replies[:12]]
    assert all(isinstance(r, wire.TableEntriesUpdated) for r in replies[:12])
    assert len(set(versions)) == 12
    assert {type(r) for r in replies[12:]} == {wire.TableEntriesUpdated, wire.TableKeyBadVersion}
    assert len(appends) <= 3  # shared appends (one, here), not one per update (13)
    found = await w.read(*(f"k{n}".encode() for n in range(12)))
    assert {k: ver for k, (_, ver) in found.items()} == {
        f"k{n}".encode(): versions[n] for n in range(12)
    }


async def test_plain_writes_to_a_table_and_table_reads_of_a_plain_segment_are_refused(
    store: SegmentStore, raw: Any
) -> None:
    w = await _table(raw)
    setup = await w.ask(wire.SetupAppend, uuid.uuid4(), TABLE, "")
    assert isinstance(setup, wire.ErrorMessage) and "table" in setup.message
    assert isinstance(await w.ask(wire.TruncateSegment, TABLE, 0, ""), wire.ErrorMessage)
    await store.create_segment("sc/plain/0.#epoch.0")
    reply = await w.ask(wire.ReadTable, "sc/plain/0.#epoch.0", "", (wire.TableKey(b"k"),))
    assert isinstance(reply, wire.ErrorMessage) and "not a table" in reply.message


async def test_bad_table_input_gets_a_clear_error_and_the_table_serves_on(raw: Any) -> None:
    w = await _table(raw)
    empty = await w.update([(b"", b"v", NO_VERSION)])
    assert isinstance(empty, wire.ErrorMessage) and "empty" in empty.message
    huge = await w.update([(b"k" * 9000, b"v", NO_VERSION)])
    assert isinstance(huge, wire.ErrorMessage) and "8192" in huge.message
    token = await w.ask(wire.ReadTableEntries, TABLE, "", 5, wire.TableIteratorArgs(b"junk"))
    assert isinstance(token, wire.ErrorMessage) and "continuation token" in token.message
    missing = await w.ask(wire.ReadTableEntriesDelta, "sc/none_kvtable/0.#epoch.0", "", 0, 10)
    assert isinstance(missing, wire.NoSuchSegment)
    assert isinstance(await w.update([(b"k", b"v", NO_VERSION)]), wire.TableEntriesUpdated)


async def test_delete_must_be_empty_is_refused_while_entries_remain(raw: Any) -> None:
    w = await _table(raw)
    await w.update([(b"k", b"v", NO_VERSION)])
    refused = await w.ask(wire.DeleteTableSegment, TABLE, True, "")
    assert isinstance(refused, wire.TableSegmentNotEmpty)
    assert isinstance(await w.ask(wire.DeleteTableSegment, TABLE, False, ""), wire.SegmentDeleted)
    gone = await w.ask(wire.DeleteTableSegment, TABLE, False, "")
    assert isinstance(gone, wire.NoSuchSegment)


async def test_a_key_twice_in_a_batch_is_checked_against_the_table_before_it(raw: Any) -> None:
    """Pravega's Rust client sends a map's lock key with each entry of the map, in one batch."""
    w = await _table(raw)
    batch = [(b"lock", b"1", wire.KEY_NOT_EXISTS), (b"a", b"x", wire.KEY_NOT_EXISTS),
             (b"lock", b"2", wire.KEY_NOT_EXISTS)]  # fmt: skip
    updated = await w.update(batch)
    assert isinstance(updated, wire.TableEntriesUpdated), updated
    versions = updated.updated_versions
    assert (await w.read(b"lock"))[b"lock"] == (b"2", versions[2])
    assert isinstance(await w.update(batch), wire.TableKeyBadVersion)


async def test_a_read_of_a_ready_index_is_answered_in_its_own_turn(
    server: SegmentStoreServer, raw: Any
) -> None:
    """``ReadTable`` is answered without a task once the table's index is loaded here; before
    that (a node that has not opened the table yet) it takes the task that loads it."""
    w = await _table(raw)
    (version,) = (await w.update([(b"k", b"v", NO_VERSION)])).updated_versions
    read = wire.ReadTable(99, TABLE, "", (wire.TableKey(b"k"), wire.TableKey(b"nope")))
    pending = server.requests.read_table_now(read)
    assert pending is not None
    outcome, reply_of = pending
    assert outcome.done()
    reply = reply_of(outcome.result())
    assert isinstance(reply, wire.TableRead) and reply.request_id == 99
    assert [(k.data, k.version, v.data) for k, v in reply.entries] == [
        (b"k", version, b"v"), (b"nope", wire.KEY_NOT_EXISTS, b""),
    ]  # fmt: skip
    server.tables._tables.clear()  # as on a node that has not opened it yet
    assert server.requests.read_table_now(read) is None
    assert await w.read(b"k") == {b"k": (b"v", version)}  # the task loads it again
