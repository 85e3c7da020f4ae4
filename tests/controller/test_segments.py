"""Pure segment rules: ids, names, key ranges, stream-cut order, overlay, splits and merges."""

from __future__ import annotations

import pytest

from controller_app import segments as sg
from controller_app.segments import CutOrder, Segment
from millrace.kernel import naming
from millrace.kernel.naming import container_for

A = Segment(0, 0, 0.0, 0.5)
B = Segment(1, 0, 0.5, 1.0)
C = Segment(2, 1, 0.5, 0.75)
D = Segment(3, 1, 0.75, 1.0)
E = Segment(4, 2, 0.5, 1.0)


def test_segment_ids() -> None:
    sid = naming.segment_id(5, 7)
    assert sid == 0x0000000500000007
    assert (naming.segment_epoch(sid), naming.segment_number(sid)) == (5, 7)
    assert naming.segment_id(naming.EPOCH_MAX, 2**32 - 1) == 2**63 - 1
    for bad in ((-1, 0), (0, -1), (2**31, 0), (0, 2**32)):
        with pytest.raises(ValueError):
            naming.segment_id(*bad)


def test_qualified_names() -> None:
    assert naming.qualified_segment_name("sc1", "st1", 0) == "sc1/st1/0.#epoch.0"
    assert naming.qualified_segment_name("s", "st", 0x0000000100000001) == "s/st/1.#epoch.1"
    assert naming.parse_segment_name("s/st/1.#epoch.1") == ("s", "st", 0x0000000100000001)
    assert naming.parse_segment_name("s/st/3") == ("s", "st", 3)
    with pytest.raises(ValueError):
        naming.parse_segment_name("s/st/x.#epoch.1")


def test_container_is_the_segment_stores_hash() -> None:
    name = naming.qualified_segment_name("sc", "st", naming.segment_id(2, 9))
    txn = f"{name}#transaction.{'ab' * 16}"
    assert container_for(txn, 8) == container_for(name, 8)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 10, 49])
def test_uniform_ranges_end_exactly_at_one(count: int) -> None:
    ranges = sg.uniform_ranges(count)
    assert ranges[0][0] == 0.0 and ranges[-1][1] == 1.0
    assert all(ranges[i][1] == ranges[i + 1][0] for i in range(count - 1))
    parts = sg.uniform_ranges(3, 0.5, 0.8)
    assert parts[0][0] == 0.5 and parts[-1][1] == 0.8


def test_decoded_segments_end_exactly_at_one() -> None:
    assert Segment.decode([1, 0, 0.9, 0.9999999999999999, 5]).key_end == 1.0
    assert Segment.decode([1, 0, 0.1, 0.5, 5]).key_end == 0.5


def test_segments_are_equal_by_id() -> None:
    assert Segment(4, 2, 0.5, 1.0, 7) == E and hash(Segment(4, 2, 0.0, 1.0)) == hash(E)
    assert {E: 1}[Segment(4, 2, 0.5, 1.0)] == 1
    assert sg.decode_segments(sg.encode_segments([B, A])) == (A, B)


def test_stream_cut_json() -> None:
    cut = {E.id: 30, A.id: 5}
    data = sg.encode_stream_cut(cut)
    assert data == {"0": 5, str(E.id): 30}
    assert sg.decode_stream_cut(data) == cut


def test_keyspace_gap() -> None:
    assert sg.keyspace_gap([A, B]) is None
    assert sg.keyspace_gap([A, C, D]) is None
    assert "not covered" in (sg.keyspace_gap([A, C]) or "")
    assert "not covered" in (sg.keyspace_gap([C, D]) or "")
    assert "overlaps" in (sg.keyspace_gap([A, B, C]) or "")


def test_compare_cuts() -> None:
    assert sg.compare_cuts({A: 0, B: 0}, {A: 0, E: 0}) is CutOrder.BEFORE
    assert sg.compare_cuts({A: 9, E: 0}, {A: 0, C: 4, D: 0}) is CutOrder.AFTER
    assert sg.compare_cuts({A: 3, C: 1, D: 1}, {A: 3, C: 1, D: 1}) is CutOrder.EQUAL
    assert sg.compare_cuts({A: 9, B: 0}, {A: 0, C: 0, D: 0}) is CutOrder.OVERLAPPING
    assert sg.compare_cuts({A: 1, C: 5, D: 0}, {A: 1, C: 4, D: 0}) is CutOrder.AFTER


def test_overlay_takes_the_later_of_epoch_and_cut() -> None:
    cut = {A: 50, C: 10, D: 20}
    assert sg.overlay([A, B], cut) == cut  # the epoch is before the cut
    assert sg.overlay([A, C, D], cut) == cut
    assert sg.overlay([A, E], cut) == {A: 50, E: 0}  # after the cut where E replaced C, D
    assert sg.overlay([A, E], {}) == {A: 0, E: 0}


def test_between() -> None:
    everything = [A, B, C, D, E]
    assert sg.between(everything, [A, B], [A, E]) == everything
    assert sg.between(everything, [A, C, D], [A, C, D]) == [A, C, D]
    assert sg.between(everything, [A, C, D], [A, E]) == [A, C, D, E]


def test_successors_with_predecessors() -> None:
    assert sg.successors_with_predecessors(B, [A, C, D], [A, B]) == {C: [B.id], D: [B.id]}
    assert sg.successors_with_predecessors(C, [A, E], [A, C, D]) == {E: [C.id, D.id]}


def test_splits_and_merges() -> None:
    assert sg.splits_and_merges([A, B], [A, C, D]) == (1, 0)
    assert sg.splits_and_merges([A, C, D], [A, E]) == (0, 1)
    assert sg.splits_and_merges([A, E], [A, E]) == (0, 0)


def test_bucket_is_stable() -> None:
    assert sg.bucket_for("sc", "st", 16) == sg.bucket_for("sc", "st", 16) < 16
    assert len({sg.bucket_for("sc", f"st{i}", 4) for i in range(64)}) == 4
