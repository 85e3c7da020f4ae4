"""The leader's rules on a real metadata database, with a clock the test moves: one lease
holder at a time, liveness judged by watching renewals, even spread with few moves, epochs
that only grow, and no move while the leader cannot judge (a new leader, a database outage)."""

from __future__ import annotations

import collections
from typing import Any

import pytest
from django.db import OperationalError

from controller_app.cluster.leader import Leader, balance
from controller_app.cluster.leases import LeaseGate
from controller_app.cluster.membership import DatabaseMembership
from controller_app.models import ClusterLease, ContainerAssignment, ContainerMove
from millrace.kernel.membership import NodeCard

pytestmark = pytest.mark.django_db

TIMEOUT = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _card(name: str, containers: int = 6) -> NodeCard:
    return NodeCard(name, "127.0.0.1", 1000 + int(name[1:]), None, containers)


def _owners() -> dict[int, str]:
    rows = ContainerAssignment.objects.values_list("container__number", "node__node_id")
    return dict(rows)


def _epochs() -> dict[int, int]:
    return dict(ContainerAssignment.objects.values_list("container__number", "generation"))


def _tick(leader: Leader, clock: Clock, membership: DatabaseMembership, *alive: str) -> None:
    """One second: the ``alive`` nodes renew, then the leader's round."""
    clock.now += 1
    for name in alive:
        membership.renew(name)
    leader.round()


@pytest.fixture
def cluster() -> Any:
    membership = DatabaseMembership()
    for name in ("n1", "n2", "n3"):
        membership.join(_card(name))
    clock = Clock()
    leader = Leader("leader-a", TIMEOUT, clock=clock)
    return membership, clock, leader


def test_balance_spreads_evenly_and_moves_only_what_it_must() -> None:
    assert balance({0: None, 1: None, 2: None}, ["a", "b"]) == {0: (None, "a"), 1: (None, "b"),
                                                                 2: (None, "a")}  # fmt: skip
    # b is gone: its two go to a and c; a and c keep theirs.
    owners = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}
    moves = balance(owners, ["a", "c"])
    assert set(moves) == {1, 4} and sorted(t for _, t in moves.values()) == ["a", "c"]
    # d joins: it takes two, one from each of the full nodes, nothing else moves.
    owners = {0: "a", 1: "a", 2: "a", 3: "c", 4: "c", 5: "c"}
    moves = balance(owners, ["a", "c", "d"])
    assert len(moves) == 2 and {t for _, t in moves.values()} == {"d"}
    assert collections.Counter(s for s, _ in moves.values()) == {"a": 1, "c": 1}
    assert balance({0: "a"}, []) == {}  # nobody to give them to: nothing moves


def test_a_new_leader_first_watches_then_spreads_the_containers(cluster: Any) -> None:
    membership, clock, leader = cluster
    leader.round()
    assert _owners() == {}  # no node seen renewing yet
    _tick(leader, clock, membership, "n1", "n2", "n3")
    assert collections.Counter(_owners().values()) == {"n1": 2, "n2": 2, "n3": 2}
    assert sorted(_epochs().values()) == [1, 2, 3, 4, 5, 6]
    assert membership.renew("n1") == {c: e for c, e in _epochs().items() if _owners()[c] == "n1"}


def test_a_silent_node_is_gone_after_the_timeout_and_its_containers_move(cluster: Any) -> None:
    membership, clock, leader = cluster
    leader.round()
    _tick(leader, clock, membership, "n1", "n2", "n3")
    before = _epochs()
    for _ in range(int(TIMEOUT) - 1):
        _tick(leader, clock, membership, "n1", "n2")
    assert "n3" in _owners().values()  # not yet: within the timeout
    _tick(leader, clock, membership, "n1", "n2")
    _tick(leader, clock, membership, "n1", "n2")
    assert collections.Counter(_owners().values()) == {"n1": 3, "n2": 3}
    moved = {c for c in before if _epochs()[c] != before[c]}
    assert len(moved) == 2 and min(_epochs()[c] for c in moved) > max(before.values())
    assert set(ContainerMove.objects.filter(reason="failover").values_list("container", flat=True)
               ) == moved  # fmt: skip


def test_a_node_that_left_is_gone_at_once(cluster: Any) -> None:
    membership, clock, leader = cluster
    leader.round()
    _tick(leader, clock, membership, "n1", "n2", "n3")
    membership.leave("n3")
    _tick(leader, clock, membership, "n1", "n2")
    assert collections.Counter(_owners().values()) == {"n1": 3, "n2": 3}


def test_no_move_while_the_leader_cannot_judge(cluster: Any) -> None:
    """After a gap in its watching (a database outage: nobody could renew), the leader waits a
    whole timeout before calling anyone gone; the nodes renewing meanwhile keep everything."""
    membership, clock, leader = cluster
    beats = {"fail": False}

    def heartbeat() -> None:  # the controller's own renewal, the first call of each round
        if beats["fail"]:
            raise OperationalError("connection refused")

    leader.heartbeat = heartbeat
    leader.round()
    _tick(leader, clock, membership, "n1", "n2", "n3")
    before = _owners()
    beats["fail"] = True
    for _ in range(20):  # 20 s of outage: every round fails at once, no renewal moved
        clock.now += 1
        with pytest.raises(OperationalError):
            leader.round()
    beats["fail"] = False
    _tick(leader, clock, membership, "n1")  # n1 is back first: the others are not gone yet
    assert _owners() == before
    for _ in range(3):
        _tick(leader, clock, membership, "n1", "n2", "n3")
    assert _owners() == before


def test_one_lease_holder_and_a_deposed_leader_writes_nothing(cluster: Any) -> None:
    membership, clock, leader = cluster
    other = Leader("leader-b", TIMEOUT, clock=clock)
    leader.round()
    other.round()
    assert leader.lease.held and not other.lease.held
    _tick(leader, clock, membership, "n1", "n2", "n3")
    # leader-a stops renewing; once its lease expired, leader-b takes it in a higher term.
    ClusterLease.objects.filter(name="assignment").update(expires_ms=0)
    other.round()
    assert other.lease.held and other.lease.term == leader.lease.term + 1
    before = _epochs()
    membership.leave("n3")
    leader._apply({0: ("n1", "n2")}, gone=set())  # a late write of the deposed leader
    assert _epochs() == before
    clock.now += 1
    other.round()  # (watching: n1 and n2 not seen moving yet, n3 left)
    _tick(other, clock, membership, "n1", "n2")
    assert "n3" not in _owners().values()
    assert min(e for c, e in _epochs().items() if e != before[c]) > max(before.values())


def test_a_node_with_another_container_count_is_refused(cluster: Any) -> None:
    membership, _, _ = cluster
    with pytest.raises(ValueError, match="this cluster has 6 segment containers"):
        membership.join(_card("n4", containers=8))


def test_one_beat_of_two_acts_and_the_other_takes_over_when_it_stops() -> None:
    first = LeaseGate("beat", "beat-a", ttl_s=10, check_s=2)
    second = LeaseGate("beat", "beat-b", ttl_s=10, check_s=2)
    assert first.may_act(100.0) and not second.may_act(100.0)
    assert first.may_act(101.0) and not second.may_act(101.0)  # (between checks)
    first.lease.release()  # beat-a stops cleanly
    assert second.may_act(103.0)
    assert not first.may_act(103.0)  # its next check finds the lease taken
