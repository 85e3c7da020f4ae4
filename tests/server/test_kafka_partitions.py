"""A Kafka partition's offsets (``segment_app.kafka.partitions``) on a real segment store on
memory tiers: a partition opened again from its checkpoint, as after a restart, a failover or
tier-2's offload, still numbers every event before the checkpoint, from the segment's start or
from where retention truncated it."""

from __future__ import annotations

from millrace.kernel.wire.event_frame import EVENT_HEADER, EVENT_TYPE
from segment_app.engine.store import SegmentStore
from segment_app.kafka.partitions import CHECKPOINT_EVERY_BYTES, PartitionLog

SEGMENT = "kafka/offsets/0.#epoch.0"


def _event(i: int) -> bytes:
    value = b"%06d " % i + b"x" * (i % 300)
    return EVENT_HEADER.pack(EVENT_TYPE, len(value)) + value


async def _written(store: SegmentStore, count: int) -> list[int]:
    """``count`` events of varied sizes; each one's byte offset."""
    await store.create_segment(SEGMENT)
    starts, at = [], 0
    for first in range(0, count, 100):
        batch = [_event(i) for i in range(first, min(first + 100, count))]
        for event in batch:
            starts.append(at)
            at += len(event)
        await store.append(SEGMENT, b"".join(batch))
    return starts


async def _reopened(store: SegmentStore) -> PartitionLog:
    log = PartitionLog(store, SEGMENT)
    await log.open()
    return log


async def test_a_partition_reopened_from_its_checkpoint_finds_every_offset(
    store: SegmentStore,
) -> None:
    starts = await _written(store, 12_000)
    first = await _reopened(store)
    assert await first.end_offset() == 12_000  # (counted: a checkpoint stored past 1 MiB)
    assert first._stored_bytes >= CHECKPOINT_EVERY_BYTES

    again = await _reopened(store)  # (as after a restart: it starts at the checkpoint)
    assert again.frontier_records > 0
    assert await again.start_offset() == 0
    for offset in (0, 1, 4_321, again.frontier_records - 1, 11_999):
        position = await again.position_of(offset)
        assert position == starts[offset]
        assert (await again.read(offset, 1))[0].startswith(b"%06d " % offset)
        assert await again.records_at(position) == offset


async def test_after_a_truncation_short_of_the_checkpoint_offsets_keep_their_numbers(
    store: SegmentStore,
) -> None:
    starts = await _written(store, 12_000)
    assert await (await _reopened(store)).end_offset() == 12_000
    await store.truncate(SEGMENT, starts[3_000])  # (retention, short of the checkpoint)
    again = await _reopened(store)
    assert again.frontier_records > 3_000
    assert await again.start_offset() == 3_000
    assert await again.position_of(3_001) == starts[3_001]
    assert (await again.read(5_000, 1))[0].startswith(b"005000 ")
