"""Routing keys to segments, and segment bytes back to events."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from millrace.client.events import EventFormatError, EventSplitter, encode_event
from millrace.client.routing import KeySpace, SegmentWithRange, key_point, replace_sealed


@given(st.text())
def test_a_key_always_maps_to_the_same_point_in_the_key_space(key: str) -> None:
    point = key_point(key)
    assert 0.0 <= point < 1.0
    assert key_point(key) == point


def test_a_key_s_point_is_the_one_pravega_s_clients_compute() -> None:
    """Pravega's Rust client's own test vector (the whole check, thousands of keys against
    the ``pravega`` wheel, is in tests/acceptance/test_pravega_client.py)."""
    assert key_point("hello") == 0.658716230571337


def test_keys_spread_over_the_key_space() -> None:
    points = [key_point(f"customer-{i}") for i in range(10_000)]
    quarters = [sum(1 for p in points if q / 4 <= p < (q + 1) / 4) for q in range(4)]
    assert all(2200 < n < 2800 for n in quarters), quarters


def test_no_key_means_a_random_point() -> None:
    rng = random.Random(7)
    assert key_point(None, rng) != key_point(None, rng)


def test_keyspace_finds_the_owner_of_every_point() -> None:
    space = KeySpace(
        [SegmentWithRange(2, "b", 0.5, 1.0), SegmentWithRange(1, "a", 0.0, 0.25),
         SegmentWithRange(3, "c", 0.25, 0.5)]
    )  # fmt: skip
    # A point on a boundary goes to the lower segment (Pravega's ``ceilingEntry``).
    points = (0.0, 0.2, 0.25, 0.26, 0.49, 0.5, 0.5001, 0.999)
    assert [space.segment_for(p).name for p in points] == [
        "a", "a", "a", "c", "c", "c", "b", "b"]  # fmt: skip
    with pytest.raises(ValueError):
        KeySpace([])


@given(st.lists(st.binary(max_size=300), max_size=30), st.integers(1, 64))
def test_splitter_gives_back_the_events_from_any_chunking(events: list[bytes], chunk: int) -> None:
    data = b"".join(encode_event(e) for e in events)
    splitter, got = EventSplitter(100), []
    for start in range(0, len(data), chunk):
        got += splitter.feed(100 + start, data[start : start + chunk])
    assert [e.data for e in got] == events
    assert splitter.buffered == 0 and splitter.offset == 100 + len(data)
    if got:
        assert got[0].offset == 100 and got[-1].next_offset == 100 + len(data)


def test_splitter_rejects_bytes_that_are_not_events() -> None:
    with pytest.raises(EventFormatError, match="no event header at offset 5"):
        EventSplitter(5).feed(5, b"\x00\x00\x00\x07garbage!")
    with pytest.raises(EventFormatError, match="expected 0"):
        EventSplitter(0).feed(3, b"")


def test_a_merge_successor_takes_only_the_sealed_segments_range() -> None:
    """Scale down merges A and C into M. When the writer finds C sealed first, keys of A must
    still go to A (sealed too, so its pending events are sent on to M in order) and not
    straight to M, where they would overtake the key's earlier events pending on A."""
    a = SegmentWithRange(1, "s/st/1", 0.0, 0.5)
    c = SegmentWithRange(2, "s/st/2", 0.5, 1.0)
    m = SegmentWithRange(3, "s/st/3.#epoch.1", 0.0, 1.0)
    after_c = replace_sealed(KeySpace([a, c]), c, [m])
    assert after_c.segment_for(0.25).segment_id == 1
    assert after_c.segment_for(0.75).segment_id == 3
    after_a = replace_sealed(after_c, a, [m])
    assert {after_a.segment_for(p).segment_id for p in (0.0, 0.25, 0.5, 0.99)} == {3}
    # M now holds two ranges; sealed by a split (the writer's record of M is one of them),
    # its successors take both.
    m1, m2 = SegmentWithRange(6, "s/st/6", 0.0, 0.5), SegmentWithRange(7, "s/st/7", 0.5, 1.0)
    clipped_m = after_a.segment_for(0.75)
    after_m = replace_sealed(after_a, clipped_m, [m1, m2])
    assert [after_m.segment_for(p).segment_id for p in (0.0, 0.25, 0.6, 0.99)] == [6, 6, 7, 7]
    # A split: each successor gets its part.
    a1, a2 = SegmentWithRange(4, "s/st/4", 0.0, 0.25), SegmentWithRange(5, "s/st/5", 0.25, 0.5)
    split = replace_sealed(KeySpace([a, c]), a, [a1, a2])
    assert [split.segment_for(p).segment_id for p in (0.1, 0.3, 0.6)] == [4, 5, 2]
