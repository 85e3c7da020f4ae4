"""Two segment stores of a cluster on shared tiers (file tier-1 under one root, one filesystem
tier-2), in one process: a store serves exactly the containers it is assigned, a container
that moves is recovered by its new owner with everything acknowledged, the old owner is fenced
by the assignment's epoch in tier-1, and a store that was paused serves nothing."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from millrace.kernel.naming import container_for
from segment_app.engine.bootstrap import StoreSettings, build_segment_store
from segment_app.engine.config import SegmentStoreConfig
from segment_app.engine.containers.container import epoch_range
from segment_app.engine.errors import ContainerOfflineError, SegmentNotFoundError
from segment_app.engine.store import SegmentStore

CONTAINERS = 2


def _store(tmp_path: Path, name: str) -> SegmentStore:
    settings = StoreSettings(
        data_dir=str(tmp_path / name),
        tier1="file",
        tier1_options={"root": str(tmp_path / "tier1"), "fsync": False},
        tier2="filesystem",
        tier2_options={"root": str(tmp_path / "tier2"), "fsync": False},
        store=SegmentStoreConfig(container_count=CONTAINERS),
    )
    store = build_segment_store(settings)
    store.clustered = True
    return store


def _segment_in(container: int, stream: str = "st") -> str:
    return next(
        name for i in range(100)
        if container_for(name := f"sc/{stream}/{i}.#epoch.0", CONTAINERS) == container
    )  # fmt: skip


async def test_a_moved_container_keeps_its_data_and_fences_its_old_owner(tmp_path: Path) -> None:
    a, b = _store(tmp_path, "a"), _store(tmp_path, "b")
    await a.start()
    await b.start()
    segment = _segment_in(0)
    try:
        await a.follow({0: 1, 1: 2})
        with pytest.raises(ContainerOfflineError, match="not served by this node"):
            await b.create_segment(segment)
        await a.create_segment(segment)
        await a.append(segment, b"before the move")
        assert a.containers[0].epoch == epoch_range(1)[0]

        await b.follow({0: 3})  # the leader moved container 0 to b (a has not heard yet)
        assert b.containers[0].epoch == epoch_range(3)[0]
        assert (await b.read(segment, 0, 100)).data == b"before the move"
        with pytest.raises(ContainerOfflineError):  # a is fenced in tier-1: no acknowledgement
            await a.append(segment, b"from the old owner")
        await b.append(segment, b", after")
        assert bytes((await b.read(segment, 0, 100)).data) == b"before the move, after"

        await a.follow({1: 2})  # a hears of it: it stops container 0, keeps container 1
        assert set(a.containers) == {1} and a.assigned == {1: 2}
        # A late start of the old assignment finds the log past its range and stays down.
        await a.follow({0: 1, 1: 2})
        assert 0 not in a.containers
    finally:
        await a.stop()
        await b.stop()


async def test_an_old_owner_never_denies_a_segment_its_successor_created(tmp_path: Path) -> None:
    """The old owner, not told yet that its container moved, is asked about a segment the new
    owner created since (a transaction's shadow, in the chaos run): it answers WrongHost
    (``ContainerOfflineError``), which sends the client to the controller, never "no such
    segment". While it is the owner, a segment that does not exist is still denied."""
    a, b = _store(tmp_path, "a"), _store(tmp_path, "b")
    await a.start()
    await b.start()
    first, later = _segment_in(0), _segment_in(0, "later")
    try:
        await a.follow({0: 1})
        await a.create_segment(first)
        with pytest.raises(SegmentNotFoundError):
            await a.get_info(later)
        await b.follow({0: 2})  # moved to b; a has not heard
        await b.create_segment(later)
        calls = (
            a.get_info(later), a.read(later, 0, 10), a.get_attributes(later, []),
            a.last_event_number(later, uuid.uuid4()),
        )  # fmt: skip
        for call in calls:
            with pytest.raises(ContainerOfflineError):
                await call
        assert (await b.get_info(later)).length == 0
    finally:
        await a.stop()
        await b.stop()


async def test_a_paused_store_serves_nothing_until_it_is_told_again(tmp_path: Path) -> None:
    a = _store(tmp_path, "a")
    await a.start()
    segment = _segment_in(1)
    try:
        await a.follow({0: 1, 1: 2})
        await a.create_segment(segment)
        a.watch(0.05)  # the pause check's tick, then no tick for longer than its limit
        await asyncio.sleep(0.1)
        with pytest.raises(ContainerOfflineError, match="paused"):
            await a.append(segment, b"x")
        a.suspend(None)  # (what a renewal after the pause does)
        a.watch(60)
        await a.append(segment, b"x")
    finally:
        await a.stop()
