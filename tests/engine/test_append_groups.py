"""Append groups (``append_group_nowait``): many appends, one durable log group, one future."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest

from segment_app.engine.api import AppendItem, AttributeUpdate
from segment_app.engine.errors import (
    ContainerOfflineError,
    SegmentNotFoundError,
    SegmentSealedError,
    TooLargeError,
)

from .conftest import Tiers


async def read_all(container, name: str) -> bytes:
    info = await container.get_info(name)
    return (await container.read(name, 0, info.length)).data if info.length else b""


async def test_group_outcomes_in_order_and_no_gap_after_a_refused_append(tiers: Tiers) -> None:
    c = await tiers.start()
    for name in ("a", "b", "s"):
        await c.create_segment(name)
    await c.seal("s")
    wa, wb, ws = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    too_big = b"x" * (tiers.config.append_bytes_max + 1)
    items = [
        AppendItem("a", b"a1;", wa, 1),
        AppendItem("b", b"b1;", wb, 1),
        AppendItem("a", too_big, wa, 2),
        AppendItem("a", b"a3;", wa, 3),  # after a refused append of its writer: refused too
        AppendItem("b", b"b2;", wb, 2),
        AppendItem("nope", b"n1;", uuid.uuid4(), 1),
        AppendItem("s", b"s1;", ws, 1),
        AppendItem("b", b"b2;", wb, 2),  # a duplicate: acknowledged, not written
        AppendItem("b", b"b3;", wb, 3),
    ]
    await c.append_group_nowait(items)
    assert [type(i.error) for i in items] == [
        type(None),
        type(None),
        TooLargeError,
        TooLargeError,
        type(None),
        SegmentNotFoundError,
        SegmentSealedError,
        type(None),
        type(None),
    ]
    assert [i.result.length for i in items if i.result] == [3, 3, 6, 6, 9]
    assert items[7].result is not None and items[7].result.duplicate
    assert await read_all(c, "a") == b"a1;"
    assert await read_all(c, "b") == b"b1;b2;b3;"
    assert await c.last_event_number("b", wb) == 3
    await c.stop()
    c = await tiers.start()  # what was acknowledged is in tier-1
    assert await read_all(c, "b") == b"b1;b2;b3;"
    await c.stop()


async def test_group_larger_than_a_frame_is_written_in_order_and_recovered(tiers: Tiers) -> None:
    c = await tiers.start()
    for name in ("a", "b"):
        await c.create_segment(name)
    wa, wb = uuid.uuid4(), uuid.uuid4()
    piece = 60 * 1024  # 40 of them fill several 1 MiB frames
    items = [
        AppendItem(name, bytes([i]) * piece, writer, i // 2 + 1)
        for i, (name, writer) in enumerate([("a", wa), ("b", wb)] * 20)
    ]
    await c.append_group_nowait(items)
    assert [i.error for i in items] == [None] * 40
    assert [i.result.length for i in items] == [piece * (n // 2 + 1) for n in range(40)]
    assert [i.result.previous_event_number for i in items[2:4]] == [1, 1]
    frames = tiers.log_store.frames  # the appends are records of several frames
    assert len(frames) > 3
    await c.append("a", b"tail", writer_id=wa, event_number=21)
    expected_a = b"".join(i.data for i in items if i.segment == "a") + b"tail"
    assert await read_all(c, "a") == expected_a
    await c.stop()
    c = await tiers.start()
    assert await read_all(c, "a") == expected_a
    assert await read_all(c, "b") == b"".join(i.data for i in items if i.segment == "b")
    assert await c.last_event_number("a", wa) == 21
    assert await c.last_event_number("b", wb) == 20
    await c.stop()


async def test_reads_at_any_offset_of_appends_kept_unjoined(tiers: Tiers) -> None:
    """Appends of groups are cached as the buffers they came in (``PIECES_MAX`` to an entry,
    joined on first read): every range reads back exactly, before and after more appends."""
    c = await tiers.start()
    await c.create_segment("a")
    w = uuid.uuid4()
    written = b""
    for round_ in range(3):
        payloads = [bytes([65 + (round_ * 7 + i) % 26]) * (1 + i % 5) for i in range(45)]
        views = [memoryview(b"hdr" + p)[3:] for p in payloads]  # as the wire server's views
        items = [AppendItem("a", v, w, round_ * 100 + i + 1) for i, v in enumerate(views)]
        await c.append_group_nowait(items)
        written += b"".join(payloads)
        for start in range(0, len(written), 7):
            for size in (1, 5, 33, 200):
                got = (await c.read("a", start, size)).data
                assert got == written[start : start + size]
    assert c.read_index.cache_bytes == len(written)
    await c.flush_to_storage()
    assert (await c.read("a", 0, len(written))).data == written
    await c.stop()


async def test_appends_near_the_entry_size_get_entries_of_their_own_never_joined(
    tiers: Tiers,
) -> None:
    """A bulk writer's appends just under ``cache_entry_bytes_max`` (whole events to a
    megabyte) each get an entry of their own: adding one to the last would pass the size and
    make the flush join the two (a copy of every byte)."""
    c = await tiers.start()
    await c.create_segment("a")
    size = c.config.read_index.cache_entry_bytes_max - 4
    views = [memoryview(bytes([65 + i]) * size) for i in range(3)]
    items = [AppendItem("a", v, None, -1) for v in views]
    await c.append_group_nowait(items)
    await asyncio.gather(*(c.append("a", b"small") for _ in range(2)))
    entries = c.read_index._segments[c.metadata.get("a").segment_id].entries
    assert [len(e.pieces) for e in entries] == [1, 1, 1, 2]  # (the two small ones together)
    assert all(e.pieces[0] is v for e, v in zip(entries, views, strict=False))
    await c.flush_to_storage()
    assert await read_all(c, "a") == b"".join(views) + b"small" * 2
    await c.stop()


async def test_group_sees_an_attribute_update_still_in_flight(tiers: Tiers) -> None:
    """The writer's event number set by an UpdateAttributes queued just before (not yet
    durable) is what a group's appends are deduplicated against."""
    c = await tiers.start()
    await c.create_segment("a")
    w = uuid.uuid4()
    update = asyncio.ensure_future(c.update_attributes("a", [AttributeUpdate(w, 10)]))
    await asyncio.sleep(0)  # queued, not yet processed
    items = [AppendItem("a", b"old;", w, 5), AppendItem("a", b"new;", w, 11)]
    await c.append_group_nowait(items)
    await update
    assert items[0].result is not None and items[0].result.duplicate
    assert items[1].result is not None and items[1].result.previous_event_number == 10
    assert await read_all(c, "a") == b"new;"
    await c.stop()


async def test_conditional_appends_in_a_group(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment("a")
    w = uuid.uuid4()
    items = [
        AppendItem("a", b"one;", w, 1, expected_offset=0),
        AppendItem("a", b"bad;", w, 2, expected_offset=0),  # the segment is 4 long by now
        AppendItem("a", b"two;", w, 3, expected_offset=4),
        AppendItem("a", b"any;", w, 4),
    ]
    await c.append_group_nowait(items)
    assert [type(i.error).__name__ for i in items] == ["NoneType", "BadOffsetError"] + [
        "NoneType"
    ] * 2
    assert [i.result.length for i in items if i.result] == [4, 8, 12]
    assert await read_all(c, "a") == b"one;two;any;"
    await c.stop()


async def test_group_fails_as_a_whole_when_tier1_fails(tiers: Tiers) -> None:
    c = await tiers.start()
    await c.create_segment("a")
    await c.append("a", b"kept;")
    tiers.log_faults.fail_next("append_batch")
    items = [AppendItem("a", b"lost%d;" % i) for i in range(5)]
    with pytest.raises(ContainerOfflineError):
        await c.append_group_nowait(items)
    await c.stop()
    c = await tiers.start()
    assert await read_all(c, "a") == b"kept;"
    await c.stop()


async def test_empty_group(tiers: Tiers) -> None:
    c = await tiers.start()
    assert await c.append_group_nowait([]) is None
    await c.stop()


async def test_a_batch_waiting_for_a_frame_slot_fails_when_tier1_fails(tiers: Tiers) -> None:
    """Appends taken into a batch but still waiting for a frame slot when tier-1 fails are
    answered (container offline), not left waiting: one frame in flight at a time, each append
    a frame of its own, and the first frame's write fails."""
    log_config = dataclasses.replace(
        tiers.config.durable_log, frame_bytes_max=4096, frames_in_flight_max=1
    )
    tiers.config = dataclasses.replace(tiers.config, durable_log=log_config)
    c = await tiers.start()
    names = [f"s{i}" for i in range(5)]
    for name in names:
        await c.create_segment(name)
    tiers.log_faults.fail_next("append_batch")
    appends = [asyncio.ensure_future(c.append(name, b"x" * 3000)) for name in names]
    outcomes = await asyncio.wait_for(asyncio.gather(*appends, return_exceptions=True), 5)
    assert all(isinstance(o, ContainerOfflineError) for o in outcomes), outcomes
    await c.stop()
