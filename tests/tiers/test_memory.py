"""Memory tiers beyond the contract: shared stores, fault and latency injection."""

from __future__ import annotations

import asyncio

import pytest

from tiers.base import ChunkNotFoundError, DataLogError, DataLogFencedError, StorageError
from tiers.memory import (
    FaultInjector,
    MemoryChunkStorage,
    MemoryDurableDataLog,
    MemoryLogStore,
    chunk_store,
    clear_chunk_stores,
    clear_log_stores,
    log_store,
)


async def frames_of(log: MemoryDurableDataLog) -> list[bytes]:
    return [f async for _, f in log.read_all()]


async def test_instances_with_one_log_id_share_the_log() -> None:
    clear_log_stores()
    first = MemoryDurableDataLog(log_id="container-3")
    await first.open(1)
    await first.append(b"a")
    second = MemoryDurableDataLog(log_id="container-3")
    await second.open(2)
    assert await frames_of(second) == [b"a"]
    assert second.store is log_store("container-3")
    with pytest.raises(DataLogFencedError):
        await first.append(b"b")
    clear_log_stores()
    assert log_store("container-3") is not second.store


async def test_without_store_or_log_id_each_log_is_private() -> None:
    first, second = MemoryDurableDataLog(), MemoryDurableDataLog()
    await first.open(1)
    await second.open(1)
    assert first.store is not second.store


async def test_injected_append_failure_stores_nothing_and_sticks() -> None:
    faults = FaultInjector(seed=1)
    store = MemoryLogStore()
    log = MemoryDurableDataLog(store=store, faults=faults)
    await log.open(1)
    await log.append(b"ok-1")
    faults.fail_next("append_batch")
    with pytest.raises(DataLogError, match="injected"):
        await log.append(b"lost")
    with pytest.raises(DataLogError, match="injected"):
        await log.append(b"refused: failures are sticky")
    assert faults.failures["append_batch"] == 1
    successor = MemoryDurableDataLog(store=store)
    await successor.open(2)
    await successor.append(b"ok-2")
    assert await frames_of(successor) == [b"ok-1", b"ok-2"]


async def test_a_failed_batch_fails_everything_queued_behind_it() -> None:
    faults = FaultInjector()
    faults.add_latency("append_batch", 0.01)  # lets a queue build up behind the first write
    log = MemoryDurableDataLog(faults=faults, batch_frames_max=4)
    await log.open(1)
    faults.fail_next("append_batch")
    appends = [log.append(b"%d" % i) for i in range(10)]
    results = await asyncio.gather(*appends, return_exceptions=True)
    assert all(isinstance(r, DataLogError) for r in results)
    assert faults.calls["append_batch"] == 1
    await log.open(2)  # reopening (with a higher epoch) clears the failure
    await log.append(b"after")
    assert await frames_of(log) == [b"after"]


async def test_latency_makes_group_commit_batches() -> None:
    faults = FaultInjector()
    faults.add_latency("append_batch", 0.005)
    log = MemoryDurableDataLog(faults=faults)
    await log.open(1)
    await asyncio.gather(*(log.append(b"x") for _ in range(100)))
    assert faults.calls["append_batch"] < 10


def failure_pattern(seed: int) -> list[bool]:
    faults = FaultInjector(seed=seed)
    faults.fail_randomly("read", 0.3)
    pattern = []
    for _ in range(50):
        try:
            faults.check("read", StorageError)
            pattern.append(False)
        except StorageError:
            pattern.append(True)
    return pattern


def test_random_faults_replay_from_the_seed() -> None:
    assert failure_pattern(7) == failure_pattern(7)
    assert failure_pattern(7) != failure_pattern(8)
    assert 5 < sum(failure_pattern(7)) < 30


def test_fault_rules_validate_arguments() -> None:
    faults = FaultInjector()
    with pytest.raises(ValueError):
        faults.fail_randomly("x", 1.5)
    with pytest.raises(ValueError):
        faults.fail_next("x", 0)
    with pytest.raises(ValueError):
        faults.add_latency("x", -1)


async def test_wildcard_rule_and_custom_error() -> None:
    faults = FaultInjector()
    storage = MemoryChunkStorage(faults=faults)
    faults.fail_next("*", 2, error=ChunkNotFoundError)
    with pytest.raises(ChunkNotFoundError, match="injected fault in 'create'"):
        await storage.create("c")
    with pytest.raises(ChunkNotFoundError):
        await storage.exists("c")
    await storage.create("c")
    faults.clear()
    assert await storage.exists("c")


async def test_injected_chunk_write_failure_changes_nothing() -> None:
    clear_chunk_stores()
    faults = FaultInjector()
    storage = MemoryChunkStorage(store_id="tier2", faults=faults)
    await storage.create("c")
    await storage.write("c", 0, b"abc")
    faults.fail_next("write")
    with pytest.raises(StorageError):
        await storage.write("c", 3, b"def")
    assert await storage.read("c", 0, 3) == b"abc"
    assert chunk_store("tier2").total_bytes() == 3


async def test_fenced_memory_log_cannot_read_either() -> None:
    store = MemoryLogStore()
    old, new = MemoryDurableDataLog(store=store), MemoryDurableDataLog(store=store)
    await old.open(1)
    await new.open(2)
    with pytest.raises(DataLogFencedError):
        await frames_of(old)
