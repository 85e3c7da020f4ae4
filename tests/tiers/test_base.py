"""What ``tiers.base`` itself guarantees to every backend: validation, group commit, closing."""

from __future__ import annotations

import array
import asyncio

import pytest

from tiers.base import (
    BadChunkOffsetError,
    ChunkNotFoundError,
    DataLogClosedError,
    DataLogError,
    DataLogFencedError,
)
from tiers.memory import FaultInjector, MemoryChunkStorage, MemoryDurableDataLog, MemoryLogStore


async def test_memoryview_of_wider_items_counts_bytes() -> None:
    log = MemoryDurableDataLog(frame_bytes_max=16)
    await log.open(1)
    words = memoryview(array.array("I", [1, 2, 3]))
    await log.append(words)
    assert [f async for _, f in log.read_all()] == [words.tobytes()]
    with pytest.raises(DataLogError):
        await log.append(memoryview(array.array("I", [0] * 5)))  # 20 bytes > 16


async def test_fenced_error_is_raised_fresh_each_time() -> None:
    store = MemoryLogStore()
    old, new = MemoryDurableDataLog(store=store), MemoryDurableDataLog(store=store)
    await old.open(1)
    await new.open(2)
    errors = []
    for _ in range(3):
        with pytest.raises(DataLogFencedError) as error:
            await old.append(b"x")
        errors.append(error.value)
    assert len({id(e) for e in errors}) == 3


async def test_close_waits_for_the_writer_and_refuses_new_appends() -> None:
    faults = FaultInjector()
    faults.add_latency("append_batch", 0.02)
    log = MemoryDurableDataLog(faults=faults)
    await log.open(1)
    pending = asyncio.ensure_future(log.append(b"in flight"))
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(log.close())
    await asyncio.sleep(0)
    with pytest.raises(DataLogClosedError):
        await log.append(b"too late")
    await closing
    assert (await pending).sequence == 1


async def test_cancelled_writer_fails_its_callers_and_stops() -> None:
    faults = FaultInjector()
    faults.add_latency("append_batch", 0.05)
    log = MemoryDurableDataLog(faults=faults, batch_frames_max=2)
    await log.open(1)
    appends = [asyncio.ensure_future(log.append(b"%d" % i)) for i in range(6)]
    await asyncio.sleep(0.01)
    assert log._writer is not None
    log._writer.cancel()
    results = await asyncio.gather(*appends, return_exceptions=True)
    assert all(isinstance(r, DataLogError) for r in results)
    await asyncio.sleep(0.1)
    assert faults.calls["append_batch"] == 0  # cancelled in its latency; no batch ran after it
    assert log.store.frames == []


async def test_empty_write_still_checks_the_chunk() -> None:
    storage = MemoryChunkStorage()
    await storage.create_with_data("c", b"abc")
    assert await storage.write("c", 3, b"") == 3
    with pytest.raises(BadChunkOffsetError):
        await storage.write("c", 1, b"")
    with pytest.raises(ChunkNotFoundError):
        await storage.write("missing", 0, b"")
