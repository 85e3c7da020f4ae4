"""The reader-group state machine (``controller_app.reader_group_state``), no database."""

from __future__ import annotations

import pytest

from controller_app.reader_group_state import GroupState, ReaderNotInGroup


def k(n: int) -> str:
    return f"sc/st/{n}"


def held(state: GroupState, reader: str) -> dict[str, int]:
    return state.readers[reader]["segments"]


def test_segments_are_shared_out_and_rebalanced_when_a_reader_joins() -> None:
    state = GroupState.start({k(n): 0 for n in range(4)})
    state.add_reader("a", 0)
    assert state.acquire("a") == {k(0): 0, k(1): 0, k(2): 0, k(3): 0}
    state.add_reader("b", 0)
    assert state.acquire("b") == {}
    assert state.surplus("a") == 2
    state.release("a", {k(0): 10, k(1): 20})
    assert state.unassigned == {k(0): 10, k(1): 20}
    assert state.acquire("b") == {k(0): 10, k(1): 20}
    assert state.surplus("a") == state.surplus("b") == 0
    # every segment is in exactly one place
    assert sorted(held(state, "a")) + sorted(held(state, "b")) == [k(2), k(3), k(0), k(1)]


def test_one_more_reader_than_fits_gets_one_from_a_reader_holding_the_most() -> None:
    state = GroupState.start({k(n): 0 for n in range(4)})
    for reader in "abc":
        state.add_reader(reader, 0)
        state.acquire(reader)
    assert [len(held(state, r)) for r in "abc"] == [4, 0, 0]
    assert state.surplus("a") == 2  # above ceil(4 / 3)
    state.release("a", dict.fromkeys(list(held(state, "a"))[:2], 7))
    assert state.acquire("a") == {}  # a does not take back what it released
    # b takes only the floor while c has less than that; then c takes the rest
    assert list(state.acquire("b").values()) == [7]
    assert list(state.acquire("c").values()) == [7]
    assert [len(held(state, r)) for r in "abc"] == [2, 1, 1]
    assert all(state.surplus(r) == 0 for r in "abc")


def test_a_successor_waits_until_all_its_predecessors_are_read() -> None:
    # 1 and 2 merge into 5: 5 is readable only after both ended.
    state = GroupState.start({k(1): 0, k(2): 0})
    state.add_reader("a", 0)
    state.acquire("a")
    successors = {k(5): [k(1), k(2)]}
    state.complete("a", k(1), 100, successors)
    assert state.future == {k(5): [k(2)]}
    assert state.completed[k(1)]["end"] == 100
    assert state.acquire("a") == {}
    state.complete("a", k(2), 70, successors)
    assert state.future == {} and state.completed == {}
    assert state.acquire("a") == {k(5): 0}


def test_a_checkpoint_is_a_consistent_cut_even_across_a_pending_merge() -> None:
    state = GroupState.start({k(1): 0, k(2): 0})
    for reader in "ab":
        state.add_reader(reader, 0)
    for reader in "ab":
        state.acquire(reader)
    assert held(state, "a") == {k(1): 0} and held(state, "b") == {k(2): 0}
    state.report("a", 1, {k(1): 40})
    state.complete("a", k(1), 100, {k(5): [k(1), k(2)]})
    state.start_checkpoint("cp1", 2)
    assert state.pending_checkpoint("a") == state.pending_checkpoint("b") == "cp1"
    assert state.acquire("a") == {}  # no acquiring while a checkpoint waits for it
    assert state.ack_checkpoint("a", "cp1", {}) is False
    assert state.checkpoint_cuts("cp1") is None
    state.report("b", 3, {k(2): 33})
    assert state.ack_checkpoint("b", "cp1", {k(2): 33}) is True
    assert state.checkpoint_cuts("cp1") == {("sc", "st"): {1: 100, 2: 33}}


def test_a_dead_reader_gives_its_segments_back_at_its_last_reported_position() -> None:
    state = GroupState.start({k(1): 0, k(2): 0})
    state.add_reader("a", 0)
    state.add_reader("b", 0)
    state.acquire("a")
    state.acquire("b")
    state.report("a", 1_000, {k(1): 500})
    state.start_checkpoint("cp", 1_000)
    state.report("b", 20_000, {})
    assert state.expire(20_000, timeout_ms=10_000) == ["a"]
    assert state.unassigned == {k(1): 500}
    assert state.checkpoint("cp")["pending"] == ["b"]  # the dead one no longer holds it back
    with pytest.raises(ReaderNotInGroup):
        state.report("a", 20_001, {})
    state.ack_checkpoint("b", "cp", {})
    assert state.checkpoint_cuts("cp") == {("sc", "st"): {1: 500, 2: 0}}


def test_positions_never_move_back_and_unheld_segments_are_ignored() -> None:
    state = GroupState.start({k(1): 0, k(2): 0})
    state.add_reader("a", 0)
    state.acquire("a")
    state.report("a", 1, {k(1): 50})
    state.report("a", 2, {k(1): 10, k(9): 99})
    assert held(state, "a")[k(1)] == 50
    assert k(9) not in state.positions()


def test_the_state_survives_a_round_trip_through_json() -> None:
    import json

    state = GroupState.start({k(1): 0, k(2): 0})
    state.add_reader("a", 0)
    state.acquire("a")
    state.complete("a", k(1), 9, {k(5): [k(1), k(2)]})
    state.start_checkpoint("x", 1)
    again = GroupState.load(json.loads(json.dumps(state.dump())))
    assert again == state
    assert not again.finished()
