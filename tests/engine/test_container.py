"""Segment container behaviour, through its public methods, on in-memory tiers."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

import pytest

from segment_app.engine.api import NULL_ATTRIBUTE_VALUE, AttributeUpdate
from segment_app.engine.errors import (
    BadAttributeUpdateError,
    BadOffsetError,
    ContainerOfflineError,
    InvalidArgumentError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
    TierBackloggedError,
    TierUnavailableError,
    TooLargeError,
)
from segment_app.engine.logs.frames import parse_frame
from segment_app.engine.logs.operations import Merge, Seal
from tests.engine.conftest import Tiers

SEG = "scope/stream/0.#epoch.0"
TXN = SEG + "#transaction.0000000000000000000000000000000a"


async def read_all(container, name: str) -> bytes:
    info = await container.get_info(name)
    parts, offset = [], info.start_offset
    while offset < info.length:
        result = await container.read(name, offset, 1 << 20)
        assert result.offset == offset
        parts.append(result.data)
        offset += len(result.data)
    return b"".join(parts)


async def test_append_then_read_back(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    results = await asyncio.gather(*(c.append(SEG, b"e%04d" % i) for i in range(500)))
    assert [r.length for r in results] == [5 * (i + 1) for i in range(500)]
    assert await read_all(c, SEG) == b"".join(b"e%04d" % i for i in range(500))
    info = await c.get_info(SEG)
    assert (info.length, info.start_offset, info.sealed) == (2500, 0, False)
    await c.stop()


async def test_create_twice_and_missing_segment(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    with pytest.raises(SegmentExistsError):
        await c.create_segment(SEG)
    with pytest.raises(SegmentNotFoundError):
        await c.append("no/such/0", b"x")
    with pytest.raises(SegmentNotFoundError):
        await c.read("no/such/0", 0, 10)
    with pytest.raises(InvalidArgumentError):
        await c.create_segment("")
    with pytest.raises(TooLargeError):
        await c.append(SEG, b"x" * (c.config.append_bytes_max + 1))
    await c.stop()


async def test_idempotent_writer_drops_duplicates(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    writer = uuid.uuid4()
    assert await c.last_event_number(SEG, writer) == NULL_ATTRIBUTE_VALUE
    first = await c.append(SEG, b"a", writer_id=writer, event_number=1)
    again = await c.append(SEG, b"a", writer_id=writer, event_number=1)
    await c.append(SEG, b"b", writer_id=writer, event_number=2)
    assert first.previous_event_number == NULL_ATTRIBUTE_VALUE
    assert again.duplicate and not first.duplicate
    assert await read_all(c, SEG) == b"ab"
    assert await c.last_event_number(SEG, writer) == 2
    await c.stop()
    c = await tiers.start()  # the writer's state is durable
    assert await c.last_event_number(SEG, writer) == 2
    assert (await c.append(SEG, b"b", writer_id=writer, event_number=2)).duplicate
    assert await read_all(c, SEG) == b"ab"
    await c.stop()


async def test_conditional_append(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    await c.append(SEG, b"abc", expected_offset=0)
    with pytest.raises(BadOffsetError) as error:
        await c.append(SEG, b"xyz", expected_offset=0)
    assert error.value.length == 3
    await c.append(SEG, b"def", expected_offset=3)
    assert await read_all(c, SEG) == b"abcdef"
    await c.stop()


async def test_seal_rejects_appends_and_reads_report_end(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    await c.append(SEG, b"data")
    assert await c.seal(SEG) == 4
    assert await c.seal(SEG) == 4  # idempotent
    with pytest.raises(SegmentSealedError):
        await c.append(SEG, b"more")
    end = await c.read(SEG, 4, 100, wait_seconds=5)
    assert end.data == b"" and end.end_of_segment
    last = await c.read(SEG, 0, 100)
    assert last.data == b"data" and last.end_of_segment
    await c.stop()


async def test_tail_read_waits_for_data(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    empty = await c.read(SEG, 0, 100, wait_seconds=0.05)
    assert empty.data == b"" and empty.at_tail and not empty.end_of_segment
    reader = asyncio.create_task(c.read(SEG, 0, 100, wait_seconds=10))
    await asyncio.sleep(0.05)
    assert not reader.done()
    await c.append(SEG, b"hello")
    result = await asyncio.wait_for(reader, 2)
    assert result.data == b"hello"
    await c.stop()


async def test_truncate_and_read_below_start(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    for i in range(40):
        await c.append(SEG, bytes([i]) * 1000)
    await c.flush_to_storage()
    await c.truncate(SEG, 25_000)
    await c.truncate(SEG, 10)  # never backwards
    with pytest.raises(SegmentTruncatedError) as error:
        await c.read(SEG, 100, 10)
    assert error.value.start_offset == 25_000
    with pytest.raises(BadOffsetError):
        await c.truncate(SEG, 10**9)
    await c.flush_to_storage()
    assert await read_all(c, SEG) == b"".join(bytes([i]) * 1000 for i in range(25, 40))
    chunks = c.metadata.get(SEG).chunks
    assert chunks[0].start <= 25_000 < chunks[0].end  # chunks wholly below the start are gone
    stored = set(tiers.chunk_store.chunks)
    assert all(ch.name in stored for ch in chunks)
    await c.stop()


async def test_merge_transaction_is_atomic_and_survives_restart(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    await c.create_segment(TXN)
    await c.append(SEG, b"parent-")
    await c.append(TXN, b"txn-1;")
    await c.append(TXN, b"txn-2;")
    written = len(tiers.log_store.frames)
    assert await c.merge(SEG, TXN) == 19
    frames = [[type(op) for op in parse_frame(f)] for _, f in tiers.log_store.frames[written:]]
    assert [Seal, Merge] in frames, frames  # the seal and the merge in one tier-1 write
    assert await read_all(c, SEG) == b"parent-txn-1;txn-2;"
    with pytest.raises(SegmentNotFoundError):
        await c.get_info(TXN)
    await c.append(SEG, b"after")
    await c.flush_to_storage()
    assert await read_all(c, SEG) == b"parent-txn-1;txn-2;after"
    await c.stop()
    c = await tiers.start()
    assert await read_all(c, SEG) == b"parent-txn-1;txn-2;after"
    await c.stop()


async def test_a_transactions_cached_bytes_go_once_in_tier2_and_merged_reads_find_them(
    tiers: Tiers,
) -> None:
    """No reader reads a shadow segment: its bytes leave the cache once tier-2 has them
    (budget or not), while the parent's keep theirs; the merged range still reads back,
    before and after the relink, from tier-2."""
    c = await tiers.start()
    await c.create_segment(SEG)
    await c.create_segment(TXN)
    piece = bytes(range(256)) * 16
    for _ in range(8):
        await c.append(SEG, piece)
        await c.append(TXN, piece)
    await c.flush_to_storage()
    assert c.read_index.cache_bytes == 8 * len(piece)  # the parent's only, far below budget
    assert await c.merge(SEG, TXN) == 16 * len(piece)
    tier2_reads = tiers.chunk_faults.calls["read"]
    assert await read_all(c, SEG) == piece * 16
    assert tiers.chunk_faults.calls["read"] > tier2_reads  # the merged range, from tier-2
    await c.flush_to_storage()
    assert await read_all(c, SEG) == piece * 16
    await c.stop()


async def test_released_cache_entries_let_go_of_their_bytes(tiers: Tiers) -> None:
    """Entries released (a transaction flushed, a segment deleted) wait in the eviction order
    without their bytes, and the order is rid of them before it holds many."""
    from segment_app.engine.reading.read_index import FIFO_SLACK

    c = await tiers.start()
    entry_bytes = c.config.read_index.cache_entry_bytes_max
    names = [f"{SEG}#transaction.{n + (1 << 20):032x}" for n in range(6)]
    for name in names:
        await c.create_segment(name)
        for _ in range(4):
            await c.append(name, b"t" * entry_bytes)
    fifo = c.read_index._fifo
    held = [entry for _, entry in fifo]
    await c.flush_to_storage()
    assert c.read_index.cache_bytes == 0
    assert held and all(not entry.live and entry.pieces == [] for entry in held)
    for n in range(FIFO_SLACK + 50):  # far more released entries than the slack
        await c.create_segment(f"{SEG}#transaction.{n:032x}")
        await c.append(f"{SEG}#transaction.{n:032x}", b"x" * 10)
    await c.flush_to_storage()
    assert len(c.read_index._fifo) <= FIFO_SLACK
    await c.stop()


@pytest.mark.parametrize("fail_one", [False, True], ids=["all-go-up", "one-put-fails"])
async def test_without_appends_a_backlog_goes_up_in_chunks_side_by_side(
    tiers: Tiers, fail_one: bool
) -> None:
    """On a tier-2 without appends (an object store), a segment's backlog goes up as several
    chunks at once, recorded in order; a failed put is made again, and every byte reads back
    from tier-2 after a restart."""
    from segment_app.engine.containers.container import SegmentContainer
    from tiers.memory import MemoryDurableDataLog, MemoryObjectChunkStorage

    writer = dataclasses.replace(
        tiers.config.storage_writer,
        write_bytes_max=32 * 1024,
        flush_bytes_min=1 << 30,
        flush_delay_ms=600_000,
    )
    tiers.config = dataclasses.replace(tiers.config, storage_writer=writer)

    puts = {"in_flight": 0, "most": 0}

    class ObjectStore(MemoryObjectChunkStorage):
        write_many_concurrency = 4

        async def create_with_data(self, name: str, data: bytes | memoryview) -> None:
            puts["in_flight"] += 1
            puts["most"] = max(puts["most"], puts["in_flight"])
            try:
                await asyncio.sleep(0.005)  # a put takes a while: the others start meanwhile
                await super().create_with_data(name, data)
            finally:
                puts["in_flight"] -= 1

    def container() -> SegmentContainer:
        storage = ObjectStore(store=tiers.chunk_store, faults=tiers.chunk_faults)
        log = MemoryDurableDataLog(store=tiers.log_store, faults=tiers.log_faults)
        return SegmentContainer(0, log, storage, tiers.config)

    c = container()
    await c.start()
    await c.create_segment(SEG)
    piece = bytes(range(256)) * 16
    for _ in range(100):  # 400 KiB: 13 chunks of at most 32 KiB
        await c.append(SEG, piece)
    if fail_one:
        tiers.chunk_faults.fail_next("create_with_data", 1)
    await c.flush_to_storage()
    segment = c.metadata.get(SEG)
    assert segment is not None and segment.storage_length == 100 * len(piece)
    assert [chunk.start for chunk in segment.chunks] == list(range(0, 100 * len(piece), 32768))
    assert tiers.chunk_faults.failures["create_with_data"] == (1 if fail_one else 0)
    assert puts["most"] == 4  # side by side, as many as the backend takes
    await c.stop()
    c = container()
    await c.start()
    c.read_index.evict()
    assert await read_all(c, SEG) == piece * 100
    await c.stop()


async def test_merge_needs_existing_segments(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    with pytest.raises(SegmentNotFoundError):
        await c.merge(SEG, TXN)
    await c.create_segment(TXN)
    await c.seal(SEG)
    with pytest.raises(SegmentSealedError):
        await c.merge(SEG, TXN)
    await c.stop()


async def test_delete_removes_data_from_tier2(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    await c.append(SEG, b"x" * 10_000)
    await c.flush_to_storage()
    assert tiers.chunk_store.chunks
    await c.delete(SEG)
    with pytest.raises(SegmentNotFoundError):
        await c.read(SEG, 0, 1)
    await c.flush_to_storage()
    assert not tiers.chunk_store.chunks
    await c.create_segment(SEG)  # the name can be used again
    assert (await c.get_info(SEG)).length == 0
    await c.stop()


async def test_attributes_compare_and_set(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    key = uuid.uuid4()
    await c.update_attributes(SEG, [AttributeUpdate(key, 5, expected=NULL_ATTRIBUTE_VALUE)])
    with pytest.raises(BadAttributeUpdateError):
        await c.update_attributes(SEG, [AttributeUpdate(key, 6, expected=4)])
    await c.update_attributes(SEG, [AttributeUpdate(key, 7, expected=5)])
    assert await c.get_attributes(SEG, [key]) == {key: 7}
    await c.stop()
    c = await tiers.start()
    assert await c.get_attributes(SEG, [key]) == {key: 7}
    await c.stop()


async def test_reads_come_from_tier2_after_eviction(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    payload = bytes(range(256)) * 16
    for _ in range(600):  # 2.4 MiB through a 1 MiB cache
        await c.append(SEG, payload)
    await c.flush_to_storage()
    c.read_index.evict()
    assert c.read_index.cache_bytes <= c.config.read_index.cache_bytes_max
    tier2_reads = tiers.chunk_faults.calls["read"]
    assert await read_all(c, SEG) == payload * 600
    assert tiers.chunk_faults.calls["read"] > tier2_reads
    await c.stop()


@pytest.mark.parametrize("cache_reads", [True, False])
async def test_what_is_read_from_tier2_is_cached_only_where_the_tier_wants_it(
    tiers: Tiers, cache_reads: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tier whose re-reads are cheap without the cache (local files: ``cache_reads`` False)
    is read again for each read; any other once, the second read served from the cache."""
    from tiers.memory import MemoryChunkStorage

    monkeypatch.setattr(MemoryChunkStorage, "cache_reads", cache_reads)
    c = await tiers.start()
    await c.create_segment(SEG)
    payload = bytes(range(256)) * 16
    for _ in range(600):  # 2.4 MiB through a 1 MiB cache: the start only in tier-2
        await c.append(SEG, payload)
    await c.flush_to_storage()
    c.read_index.evict()
    held = c.read_index.cache_bytes
    counts = []
    for _ in range(2):
        before = tiers.chunk_faults.calls["read"]
        assert (await c.read(SEG, 0, 65_536)).data == (payload * 16)[:65_536]
        counts.append(tiers.chunk_faults.calls["read"] - before)
    assert counts[0] > 0
    assert counts[1] == (0 if cache_reads else counts[0])
    if not cache_reads:
        assert c.read_index.cache_bytes == held  # nothing of tier-2 taken in
    await c.stop()


async def test_a_restart_keeps_the_cache_in_its_budget(tiers: Tiers) -> None:
    """Replaying tier-1 puts its appends back in the cache; what is in tier-2 already is
    evicted as the replay goes (``ReadIndex.append``), so a long tier-1 does not all land in
    memory."""
    rare = dataclasses.replace(tiers.config.durable_log, checkpoint_operations_min=1_000_000)
    tiers.config = dataclasses.replace(tiers.config, durable_log=rare)  # tier-1 keeps it all
    c = await tiers.start()
    await c.create_segment(SEG)
    payload = b"r" * 16_384
    for _ in range(160):  # 2.5 MiB, a 1 MiB cache
        await c.append(SEG, payload)
    await c.flush_to_storage()
    await c.stop()
    again = await tiers.start()
    assert again.read_index.cache_bytes <= again.config.read_index.cache_bytes_max
    assert await read_all(again, SEG) == payload * 160
    await again.stop()


async def test_restart_recovers_everything_acknowledged(tiers: Tiers) -> None:
    c = await tiers.start()
    names = [f"s/t/{i}.#epoch.0" for i in range(5)]
    for name in names:
        await c.create_segment(name)
    expected = {name: bytearray() for name in names}
    for i in range(300):  # several checkpoints (every 50 ops) and tier-1 truncations
        name = names[i % 5]
        data = b"%s:%d;" % (name.encode(), i)
        await c.append(name, data)
        expected[name] += data
    await c.flush_to_storage()
    await c.seal(names[0])
    await c.stop()
    assert tiers.log_store.truncated_sequence > 0, "tier-1 was never truncated"
    c = await tiers.start()
    for name in names:
        assert await read_all(c, name) == bytes(expected[name])
    assert (await c.get_info(names[0])).sealed
    await c.stop()


async def test_last_event_number_counts_appends_in_flight_once_durable(tiers: Tiers) -> None:
    """A writer that reconnects asks for its last event number while its appends of the lost
    connection are still on their way to tier-1: the answer comes once they are durable and
    counts them, so it resends nothing twice (the store dedups by whole blocks)."""
    c = await tiers.start()
    await c.create_segment(SEG)
    writer = uuid.uuid4()
    await c.append(SEG, b"a", writer_id=writer, event_number=1)
    tiers.log_faults.add_latency("append_batch", 0.2)
    in_flight = asyncio.ensure_future(c.append(SEG, b"bcd", writer_id=writer, event_number=4))
    await asyncio.sleep(0.01)  # accepted, not yet durable
    assert not in_flight.done()
    assert await c.last_event_number(SEG, writer) == 4
    assert in_flight.done()
    await c.stop()


async def test_last_event_number_fails_with_the_appends_before_it(tiers: Tiers) -> None:
    """If tier-1 loses the appends in flight, the question fails with them: no number counts an
    event that is not durable."""
    c = await tiers.start()
    await c.create_segment(SEG)
    writer = uuid.uuid4()
    await c.append(SEG, b"a", writer_id=writer, event_number=1)
    tiers.log_faults.add_latency("append_batch", 0.1)
    tiers.log_faults.fail_next("append_batch")
    lost = asyncio.ensure_future(c.append(SEG, b"b", writer_id=writer, event_number=2))
    await asyncio.sleep(0.01)
    with pytest.raises(ContainerOfflineError):
        await c.last_event_number(SEG, writer)
    with pytest.raises(ContainerOfflineError):
        await lost
    await c.stop()
    c = await tiers.start()
    assert await c.last_event_number(SEG, writer) == 1
    await c.stop()


async def test_failed_tier1_write_rolls_back_and_restart_recovers(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    await c.append(SEG, b"kept;")
    tiers.log_faults.fail_next("append_batch")
    with pytest.raises(ContainerOfflineError):
        await c.append(SEG, b"lost;")
    with pytest.raises(ContainerOfflineError):
        await c.append(SEG, b"refused;")
    await c.stop()
    c = await tiers.start()
    assert await read_all(c, SEG) == b"kept;"
    await c.append(SEG, b"next;")
    assert await read_all(c, SEG) == b"kept;next;"
    await c.stop()


async def test_second_instance_fences_the_first(tiers: Tiers) -> None:
    first = await tiers.start()
    await first.create_segment(SEG)
    await first.append(SEG, b"one;")
    await first.flush_to_storage()
    await first.append(SEG, b"unflushed;")
    stored = {k: bytes(v) for k, v in tiers.chunk_store.chunks.items()}
    second = await tiers.start()
    assert second.epoch == first.epoch + 1
    await asyncio.sleep(0.1)  # the first's storage writer would have flushed "unflushed;" by now
    for name, data in stored.items():  # the first's chunks are untouched ...
        assert bytes(tiers.chunk_store.chunks[name]) == data, name
    new = set(tiers.chunk_store.chunks) - set(stored)  # ... and it made none
    assert not [name for name in new if f".E{first.epoch}." in name]
    before = dict(tiers.chunk_store.chunks)
    with pytest.raises(ContainerOfflineError):
        await first.append(SEG, b"zombie;")
    with pytest.raises(ContainerOfflineError):
        await first.truncate(SEG, 2)
    assert {k: bytes(v) for k, v in tiers.chunk_store.chunks.items()} == {
        k: bytes(v) for k, v in before.items()
    }
    await second.append(SEG, b"two;")
    assert await read_all(second, SEG) == b"one;unflushed;two;"
    await first.stop()
    await second.stop()


async def test_tier2_faults_are_retried(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    tiers.chunk_faults.fail_next("create_with_data", 3)
    tiers.chunk_faults.fail_next("write", 3)
    for i in range(50):
        await c.append(SEG, b"%d;" % i)
    deadline = asyncio.get_running_loop().time() + 5
    while (await c.get_info(SEG)).storage_length < (await c.get_info(SEG)).length:
        assert asyncio.get_running_loop().time() < deadline, "storage writer never caught up"
        await asyncio.sleep(0.02)
    assert tiers.chunk_faults.failures["create_with_data"] == 3
    assert await read_all(c, SEG) == b"".join(b"%d;" % i for i in range(50))
    await c.stop()


async def test_appends_wait_for_a_slow_tier2_so_the_cache_stays_bounded(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment(SEG)
    tiers.chunk_faults.add_latency("create_with_data", 0.01)
    tiers.chunk_faults.add_latency("write", 0.01)
    budget = c.config.read_index.cache_bytes_max
    payload = b"z" * 16_384
    highest = 0
    for _ in range(200):  # 3 MiB through a 1 MiB cache
        await c.append(SEG, payload)
        highest = max(highest, c.read_index.cache_bytes)
    assert highest <= budget + len(payload)
    assert await read_all(c, SEG) == payload * 200
    await c.stop()


async def test_appends_held_back_too_long_are_refused_then_taken_once_tier2_returns(
    tiers: Tiers,
) -> None:
    """Tier-2 down: appends go on from tier-1 until the data waiting for tier-2 fills the
    cache; then they are held back, and past ``refuse_after_ms`` refused with a retriable
    error (nothing half-written). Once tier-2 answers, the backlog drains and appends are
    taken again; everything acknowledged reads back."""
    log_config = dataclasses.replace(tiers.config.durable_log, refuse_after_ms=300)
    tiers.config = dataclasses.replace(tiers.config, durable_log=log_config)
    c = await tiers.start()
    await c.create_segment(SEG)
    tiers.chunk_faults.fail_randomly("*", 1.0)
    payload = b"q" * 16_384
    acked = 0
    started = asyncio.get_running_loop().time()
    with pytest.raises(TierBackloggedError, match="retry later"):
        while True:  # 1 MiB of cache: refused after about 64 appends and 0.3 s held back
            await c.append(SEG, payload)
            acked += 1
    assert asyncio.get_running_loop().time() - started >= 0.3
    assert isinstance(TierBackloggedError("x"), ContainerOfflineError)  # WrongHost: retriable
    assert 50 <= acked <= 70
    assert (await c.get_info(SEG)).length == acked * len(payload)
    tiers.chunk_faults.clear()
    deadline = asyncio.get_running_loop().time() + 5
    while True:  # as a client does: again after a pause, until the backlog has drained
        try:
            await c.append(SEG, payload)
            break
        except TierBackloggedError:
            assert asyncio.get_running_loop().time() < deadline, "never taken again"
            await asyncio.sleep(0.05)
    assert await read_all(c, SEG) == payload * (acked + 1)
    await c.stop()


async def test_a_read_that_needs_a_failing_or_silent_tier2_is_a_retriable_error(
    tiers: Tiers,
) -> None:
    index = dataclasses.replace(tiers.config.read_index, storage_read_timeout_ms=200)
    tiers.config = dataclasses.replace(tiers.config, read_index=index)
    c = await tiers.start()
    await c.create_segment(SEG)
    payload = bytes(range(256)) * 64
    for _ in range(80):  # 1.25 MiB through a 1 MiB cache
        await c.append(SEG, payload)
    await c.flush_to_storage()
    c.read_index.evict()
    tiers.chunk_faults.fail_randomly("read", 1.0)
    with pytest.raises(TierUnavailableError, match=r"only in tier-2.*retry later"):
        await c.read(SEG, 0, 1 << 20)
    tiers.chunk_faults.clear()
    tiers.chunk_faults.add_latency("read", 5.0)  # hangs
    started = asyncio.get_running_loop().time()
    with pytest.raises(TierUnavailableError, match="no answer"):
        await c.read(SEG, 0, 1 << 20)
    assert asyncio.get_running_loop().time() - started < 2
    tiers.chunk_faults.clear()
    assert await read_all(c, SEG) == payload * 80  # right data once tier-2 answers
    await c.stop()


async def test_many_segments_are_flushed_together_and_failures_retried_alone(tiers: Tiers) -> None:
    """Segments with only appends to flush go to tier-2 in batches (``write_many``) with their
    layouts recorded together; a failed item of a batch is retried on the one-by-one path."""
    c = await tiers.start()
    names = [f"scope/many/{i}.#epoch.0" for i in range(40)]
    for name in names:
        await c.create_segment(name)
    batches: list[int] = []
    write_many = c.storage.write_many

    async def spy(writes):  # type: ignore[no-untyped-def]
        batches.append(len(writes))
        return await write_many(writes)

    c.storage.write_many = spy  # type: ignore[method-assign]
    tiers.chunk_faults.fail_next("create_with_data", 2)  # two items of the first batch fail
    for round_ in range(3):
        await asyncio.gather(*(c.append(n, b"%s:%d;" % (n.encode(), round_)) for n in names))
    deadline = asyncio.get_running_loop().time() + 5
    for name in names:
        while (info := await c.get_info(name)).storage_length < info.length:
            assert asyncio.get_running_loop().time() < deadline, "storage writer never caught up"
            await asyncio.sleep(0.02)
    assert max(batches) > 1  # several segments per tier-2 call
    assert tiers.chunk_faults.failures["create_with_data"] == 2
    c.read_index.evict()
    for name in names:
        expected = b"".join(b"%s:%d;" % (name.encode(), r) for r in range(3))
        assert await read_all(c, name) == expected
    await c.stop()
    again = await tiers.start()  # the recorded layouts survive a restart
    for name in names:
        assert (await again.get_info(name)).storage_length == len(await read_all(again, name))
    await again.stop()


async def test_segments_are_flushed_by_size_at_once_and_by_age_only_when_old(
    tiers: Tiers,
) -> None:
    """The storage writer's two triggers: ``flush_bytes_min`` unflushed bytes make a segment due
    at once; a trickle waits for ``flush_delay_ms`` (here a minute, so it stays in tier-1)."""
    writer = dataclasses.replace(
        tiers.config.storage_writer, flush_delay_ms=60_000, flush_bytes_min=8192
    )
    tiers.config = dataclasses.replace(tiers.config, storage_writer=writer)
    c = await tiers.start()
    big, small = "scope/s/big.#epoch.0", "scope/s/small.#epoch.0"
    await c.create_segment(big)
    await c.create_segment(small)
    await c.append(small, b"x" * 100)
    for _ in range(3):
        await c.append(big, b"y" * 4096)
    deadline = asyncio.get_running_loop().time() + 5
    while (await c.get_info(big)).storage_length < 8192:
        assert asyncio.get_running_loop().time() < deadline, "size trigger never fired"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    assert (await c.get_info(small)).storage_length == 0
    await c.stop()


async def test_large_reads_and_flushes_join_pieces_off_the_event_loop(
    tiers: Tiers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Data spanning many cache entries, over JOIN_IN_THREAD_BYTES, is joined in a worker
    thread (for reads and for tier-2 flushes) and comes out byte for byte, in order."""
    from segment_app.engine.reading import read_index

    monkeypatch.setattr(read_index, "JOIN_IN_THREAD_BYTES", 10_000)
    joins_in_threads: list[int] = []
    real_to_thread = asyncio.to_thread

    async def counting_to_thread(fn, *args):  # type: ignore[no-untyped-def]
        if fn == b"".join:
            joins_in_threads.append(sum(map(len, args[0])))
        return await real_to_thread(fn, *args)

    monkeypatch.setattr(read_index.asyncio, "to_thread", counting_to_thread)
    c = await tiers.start()
    await c.create_segment(SEG)
    chunks = [bytes([i]) * 1000 for i in range(40)]  # 40 kB over 4 kB cache entries
    for chunk in chunks:
        await c.append(SEG, chunk)
    assert (await c.read(SEG, 0, 1 << 20)).data == b"".join(chunks)  # from the cache
    await c.flush_to_storage()
    c.read_index.evict()
    stored = sorted((n, bytes(d)) for n, d in tiers.chunk_store.chunks.items() if SEG in n)
    assert b"".join(d for _, d in stored) == b"".join(chunks)  # the chunks, by offset...
    assert await read_all(c, SEG) == b"".join(chunks)  # ...and read back from tier-2
    assert joins_in_threads and max(joins_in_threads) >= 10_000
    await c.stop()


async def test_a_container_builds_its_parts_with_what_it_is_given(tiers: Tiers) -> None:
    """The composition root (or a test) chooses the read index, durable log and storage writer
    a container builds (``ContainerParts``)."""
    from segment_app.engine.containers.container import ContainerParts, SegmentContainer
    from segment_app.engine.logs.durable_log import DurableLog
    from segment_app.engine.reading.read_index import ReadIndex
    from segment_app.engine.writer.storage_writer import StorageWriter

    built: list[str] = []

    def recording(cls: type, name: str) -> object:
        def make(*args: object, **kwargs: object) -> object:
            built.append(name)
            return cls(*args, **kwargs)

        return make

    parts = ContainerParts(
        read_index=recording(ReadIndex, "read index"),  # type: ignore[arg-type]
        durable_log=recording(DurableLog, "durable log"),  # type: ignore[arg-type]
        storage_writer=recording(StorageWriter, "storage writer"),  # type: ignore[arg-type]
    )
    template = tiers.container()
    c = SegmentContainer(0, template.data_log, template.storage, template.config, parts=parts)
    await c.start()
    await c.create_segment(SEG)
    await c.append(SEG, b"x")
    assert built == ["read index", "durable log", "storage writer"]
    await c.stop()


def _with_disk_cache(tiers: Tiers, where: Path, bytes_max: int = 8 << 20) -> None:
    index = dataclasses.replace(
        tiers.config.read_index, disk_cache_path=str(where), disk_cache_bytes_max=bytes_max
    )
    tiers.config = dataclasses.replace(tiers.config, read_index=index)


async def test_a_disk_cache_serves_what_memory_cannot_hold(tiers: Tiers, tmp_path: Path) -> None:
    """Entries evicted from memory go to the on-disk cache (LMDB), and reads find them there
    instead of in tier-2."""
    _with_disk_cache(tiers, tmp_path / "cache")
    c = await tiers.start()
    await c.create_segment(SEG)
    payload = bytes(range(256)) * 64
    for _ in range(256):  # 4 MiB through a 1 MiB memory cache
        await c.append(SEG, payload)
    await c.flush_to_storage()
    c.read_index.evict()
    assert c.read_index.cache_bytes <= c.config.read_index.cache_bytes_max
    assert c.read_index.disk is not None and c.read_index.disk.bytes >= 3 << 20
    tier2_reads = tiers.chunk_faults.calls["read"]
    assert await read_all(c, SEG) == payload * 256
    assert tiers.chunk_faults.calls["read"] == tier2_reads  # memory and disk: no tier-2 read
    await c.stop()
    assert not (tmp_path / "cache").exists()  # a cache: gone with its container


async def test_with_a_disk_cache_the_tier1_backlog_grows_past_memory(
    tiers: Tiers, tmp_path: Path
) -> None:
    """Tier-2 down: data waiting for it goes to disk when memory is full, so appends are taken
    past the memory cache (up to memory and disk together); the storage writer flushes it
    from disk once tier-2 is back; a restart starts with an empty disk cache."""
    _with_disk_cache(tiers, tmp_path / "cache", bytes_max=4 << 20)
    log_config = dataclasses.replace(tiers.config.durable_log, refuse_after_ms=300)
    tiers.config = dataclasses.replace(tiers.config, durable_log=log_config)
    c = await tiers.start()
    await c.create_segment(SEG)
    tiers.chunk_faults.fail_randomly("*", 1.0)
    payload = b"d" * 16_384
    for _ in range(192):  # 3 MiB: three times the memory cache, all taken
        await c.append(SEG, payload)
    assert c.read_index.cache_bytes <= c.config.read_index.cache_bytes_max + len(payload)
    assert (await c.get_info(SEG)).storage_length == 0
    with pytest.raises(TierBackloggedError):  # memory and disk full: held back, then refused
        for _ in range(256):
            await c.append(SEG, payload)
    tiers.chunk_faults.clear()
    await c.flush_to_storage()
    info = await c.get_info(SEG)
    assert info.storage_length == info.length >= 192 * len(payload)
    assert await read_all(c, SEG) == payload * (info.length // len(payload))
    await c.stop()
    again = await tiers.start()
    assert again.read_index.disk is not None and again.read_index.disk.bytes == 0
    assert await read_all(again, SEG) == payload * (info.length // len(payload))
    await again.stop()


async def test_lone_frames_are_written_at_once_where_tier1_allows(tiers: Tiers) -> None:
    """With nothing in flight, a small frame is written on the loop's thread and committed
    there; appends arriving together still share a frame, and a large frame is handed over."""
    c = await tiers.start()
    await c.create_segment(SEG)
    log = c.durable_log
    assert log is not None
    before = log.inline_frames
    await c.append(SEG, b"alone;")
    await asyncio.gather(*(c.append(SEG, b"%d;" % i) for i in range(20)))
    await c.append(SEG, b"x" * (log.config.inline_frame_bytes_max + 1))
    written = log.inline_frames - before
    assert written == (2 if tiers.inline else 0)  # the lone append, the twenty together
    assert (await read_all(c, SEG)).startswith(b"alone;0;1;2;")
    await c.stop()
