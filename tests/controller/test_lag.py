"""Reader-group lag's parts (``controller_app.lag``): the status walked through every state
from made-up rounds, a position's age interpolated in a segment's lengths, the lengths kept,
and one group measured from given lengths and traffic."""

from __future__ import annotations

from typing import Any

import pytest

from controller_app import lag
from controller_app.models import ReaderGroup, ReaderGroupLag
from controller_app.ports import SegmentTraffic, Traffic
from controller_app.segment_client import read_traffic, segment_store


def _rounds(lags: list[int], reads: list[int], start: int = 0) -> list[dict[str, Any]]:
    return [{"at": start + 1000 * i, "lag": g, "read": r}
            for i, (g, r) in enumerate(zip(lags, reads, strict=True))]  # fmt: skip


@pytest.mark.parametrize(
    ("lags", "reads", "online", "status", "why"),
    [
        ([0, 10, 20, 30, 40, 50], [0, 0, 0, 0, 0, 0], 1, "OK", "caught up within the window"),
        ([5, 5, 5, 5, 5, 0], [0, 1, 2, 3, 4, 9], 1, "OK", "nothing unread"),
        ([9, 8], [0, 1], 1, "OK", "measuring (2 of 5 rounds)"),
        ([7, 7, 7, 9, 12], [4, 4, 4, 4, 4], 1, "STALL", "positions unmoved for 4 s with 12 bytes"),
        ([10, 20, 30, 40, 50], [0, 1, 2, 3, 4], 1, "WARN", "lag grew in each of the last 5"),
        ([10, 20, 15, 40, 50], [0, 1, 2, 3, 4], 1, "OK", "reading"),
        ([10, 20, 30, 40, 50], [0, 1, 2, 3, 4], 0, "STOP", "no reader online"),
        ([0], [0], 0, "STOP", "no reader online"),
    ],
)
def test_the_status_is_judged_over_the_window(
    lags: list[int], reads: list[int], online: int, status: str, why: str
) -> None:
    found, reason = lag.judge(_rounds(lags, reads), online)
    assert (found, reason[: len(why)]) == (status, why)


def test_a_round_that_could_not_measure_is_err_and_the_window_skips_it() -> None:
    rounds = _rounds([10, 20, 30, 40, 50], [0, 1, 2, 3, 4])
    failed = [*rounds, {"at": 9000, "lag": 0, "read": 0, "error": "no length for s/t/0"}]
    assert lag.judge(failed, 1) == ("ERR", "no length for s/t/0")
    # the failed round's made-up zero does not count as caught up once a good round follows
    after = [*failed, {"at": 10_000, "lag": 60, "read": 5}]
    assert lag.judge(after, 1)[0] == "WARN"


def test_a_positions_age_is_interpolated_between_the_lengths_seen() -> None:
    points = [[1000, 0], [2000, 100], [3000, 100], [4000, 300]]
    assert lag.age_ms(points, 300, 5000) == 0  # nothing unread
    assert lag.age_ms(points, 50, 5000) == 3500  # passed halfway from 1000 to 2000
    assert lag.age_ms(points, 100, 5000) == 2000  # appended between 3000 and 4000: at 3000
    assert lag.age_ms(points, 200, 5000) == 1500
    assert lag.age_ms([[1000, 500]], 10, 5000) == 4000  # older than the oldest point kept
    assert lag.age_ms([], 10, 5000) == 0


def test_the_lengths_keep_a_runs_first_and_last_point_for_an_hour() -> None:
    points: list[list[int]] = []
    for at, length in [(0, 10), (1, 10), (2, 10), (3, 10), (4, 20)]:
        points = lag.add_point(points, at * 1000, length)
    assert points == [[0, 10], [3000, 10], [4000, 20]]
    later = lag.add_point(points, lag.TAILS_KEPT_MS + 3500, 20)
    assert later == [[4000, 20], [lag.TAILS_KEPT_MS + 3500, 20]]


def test_a_group_is_measured_per_reader_with_events_from_the_traffic() -> None:
    state = {
        "readers": {
            "r1": {"seen": 100_000, "segments": {"s/t/0": 400, "s/t/1": 1000}},
            "gone": {"seen": 1_000, "segments": {}},
        },
        "unassigned": {"s/t/2": 0},
        "future": {"s/t/3": ["s/t/1"]},
        "completed": {},
        "checkpoints": [],
    }
    group = ReaderGroup(name="g", sync_state=state, configuration={"readerTimeoutMs": 30_000})
    row = ReaderGroupLag(group=group)
    lengths = {"s/t/0": 1000, "s/t/1": 1000, "s/t/2": 500, "s/t/3": 0}
    traffic = Traffic({"seg-0": SegmentTraffic(10.0, 1000.0, 60.0, 50, 5000)}, 60.0)
    names = {"s/t/0": "seg-0", "s/t/1": "seg-1", "s/t/2": "seg-2", "s/t/3": "seg-3"}
    report = lag.measure(group, row, lengths.get, traffic.segments.get, names.get, 110_000)
    gone, r1 = report["readers"]  # (by reader id)
    assert (r1["readerId"], r1["online"], r1["lagBytes"], r1["lagEvents"]) == ("r1", True, 600, 6)
    assert gone["online"] is False and gone["lagBytes"] == 0
    assert report["lagBytes"] == 1100
    assert report["lagEvents"] is None  # s/t/2 had no traffic: its event size is not known
    assert report["readersOnline"] == 1
    assert report["status"] == row.status == "OK"
    assert report["reason"].startswith("measuring")
    assert row.samples == [{"at": 110_000, "lag": 1100, "read": 1400}]
    assert set(row.tails) == {"s/t/0", "s/t/1", "s/t/2", "s/t/3"}

    lengths["s/t/1"] = None  # type: ignore[assignment]
    failed = lag.measure(group, row, lengths.get, traffic.segments.get, names.get, 111_000)
    assert failed["status"] == "ERR" and "s/t/1" in failed["reason"]
    assert len(row.samples) == 2


@pytest.mark.django_db
def test_one_round_at_a_time() -> None:
    """A round that finds another one's lease held leaves at once; a round gives the lease
    back when it ends."""
    from controller_app.cluster.leases import Lease
    from controller_app.models import ClusterLease

    other = Lease(lag.LEASE, "another-worker", ttl_s=30)
    assert other.hold()
    assert lag.lag_round(segment_store(), read_traffic) == 0
    assert ClusterLease.objects.get(name=lag.LEASE).holder == "another-worker"  # (left alone)
    other.release()
    assert lag.lag_round(segment_store(), read_traffic) == 0  # (no group to measure)
    after = ClusterLease.objects.get(name=lag.LEASE)
    assert after.holder != "another-worker" and after.expires_ms == 0  # (taken, given back)
