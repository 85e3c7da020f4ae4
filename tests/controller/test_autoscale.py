"""The auto-scaler's decisions, from given traffic: splits by load, merges of adjacent cold
segments never below the minimum, mute and cooldown, nothing for a fixed policy.
``tests/acceptance/test_autoscaling.py`` runs it through a node under real load."""

from __future__ import annotations

import pytest

from controller_app import selectors as sel
from controller_app.choices import ScalingPolicyType
from controller_app.ports import SegmentTraffic, Traffic
from controller_app.segments import Segment, uniform_ranges
from controller_app.workflows.autoscale import AutoscaleSettings, plan
from tests.controller.factories import StreamFactory

pytestmark = pytest.mark.django_db

SETTINGS = AutoscaleSettings(window_s=10, cooldown_s=30, mute_s=20)
NOW = 1_000_000_000
EVENTS = ScalingPolicyType.BY_RATE_IN_EVENTS_PER_SEC


def _segments(count: int, created: int = NOW - 60_000) -> list[Segment]:
    return [
        Segment(i, 1, start, end, created) for i, (start, end) in enumerate(uniform_ranges(count))
    ]


def _traffic(stream, segments: list[Segment], rates: list[float], seen: float = 60) -> Traffic:
    return Traffic(
        {
            sel.segment_name(stream, s.id): SegmentTraffic(rate, rate * 100, seen)
            for s, rate in zip(segments, rates, strict=True)
        },
        uptime_s=600,
    )


def _stream(**config):
    defaults = {"scaling_type": EVENTS, "target_rate": 1000, "scale_factor": 2, "min_segments": 1}
    return StreamFactory(**{**defaults, **config})


def test_a_hot_segment_splits_by_its_load_up_to_the_scale_factor() -> None:
    stream = _stream(scale_factor=3)
    segments = _segments(2)
    found = plan(stream, segments, _traffic(stream, segments, [2500, 400]), SETTINGS, NOW)
    assert found is not None and found.split
    assert found.sealed == [segments[0].id]
    bounds = [b for r in found.ranges for b in r]
    assert bounds == pytest.approx([0.0, 1 / 6, 1 / 6, 2 / 6, 2 / 6, 0.5])
    just_over = plan(stream, segments, _traffic(stream, segments, [1100, 0]), SETTINGS, NOW)
    assert just_over is not None and len(just_over.ranges) == 2  # at least two parts


def test_kib_per_second_policies_use_bytes() -> None:
    stream = _stream(scaling_type=ScalingPolicyType.BY_RATE_IN_KBYTES_PER_SEC, target_rate=100)
    segments = _segments(1)
    hot = Traffic(
        {sel.segment_name(stream, segments[0].id): SegmentTraffic(1, 200 * 1024, 60)}, 600
    )
    found = plan(stream, segments, hot, SETTINGS, NOW)
    assert found is not None and found.split


def test_one_scale_replaces_one_contiguous_range() -> None:
    """Hot (or cold) segments apart from each other go in separate rounds: the scale workflow
    replaces one contiguous key range at a time."""
    stream = _stream(min_segments=1)
    segments = _segments(4)
    hot = plan(stream, segments, _traffic(stream, segments, [1500, 600, 3000, 2000]), SETTINGS, NOW)
    assert hot is not None and hot.sealed == [segments[2].id, segments[3].id]  # the hottest run
    cold = plan(stream, segments, _traffic(stream, segments, [10, 10, 600, 10]), SETTINGS, NOW)
    assert cold is not None and cold.sealed == [segments[0].id, segments[1].id]
    assert cold.ranges == [(0.0, 0.5)]


def test_adjacent_cold_segments_merge_never_below_the_minimum() -> None:
    stream = _stream(min_segments=2)
    segments = _segments(4)
    found = plan(stream, segments, _traffic(stream, segments, [10, 10, 10, 10]), SETTINGS, NOW)
    assert found is not None and not found.split
    # 4 -> 2: two segments may go; the first run takes them (three merged into one).
    assert found.sealed == [s.id for s in segments[:3]]
    assert found.ranges == [(0.0, 0.75)]
    one_hot = plan(stream, segments, _traffic(stream, segments, [10, 900, 10, 10]), SETTINGS, NOW)
    assert one_hot is not None and one_hot.sealed == [segments[2].id, segments[3].id]
    # A segment between half the target and the target is neither hot nor cold.
    lukewarm = _traffic(stream, segments, [10, 600, 10, 600])
    assert plan(stream, segments, lukewarm, SETTINGS, NOW) is None
    assert plan(_stream(min_segments=4), segments, lukewarm, SETTINGS, NOW) is None


def test_cold_needs_a_whole_window_of_measurement() -> None:
    stream = _stream()
    segments = _segments(2)
    fresh = _traffic(stream, segments, [0, 0], seen=5)  # measured for half a window
    assert plan(stream, segments, fresh, SETTINGS, NOW) is None
    unseen = Traffic({}, uptime_s=5)  # never written to, monitor just started
    assert plan(stream, segments, unseen, SETTINGS, NOW) is None
    assert plan(stream, segments, Traffic({}, uptime_s=60), SETTINGS, NOW) is not None


def test_mute_cooldown_and_fixed_policies() -> None:
    stream = _stream()
    young = _segments(2, created=NOW - 25_000)  # after the mute, within the cooldown
    assert plan(stream, young, _traffic(stream, young, [9000, 9000]), SETTINGS, NOW) is None
    old = [*_segments(1, created=NOW - 60_000)]
    muted = Segment(7, 2, 0.5, 1.0, NOW - 5_000)  # created 5 s ago: muted
    mixed = [Segment(old[0].number, 1, 0.0, 0.5, NOW - 60_000), muted]
    settings = AutoscaleSettings(window_s=10, cooldown_s=0, mute_s=20)
    found = plan(stream, mixed, _traffic(stream, mixed, [9000, 9000]), settings, NOW)
    assert found is not None and found.sealed == [mixed[0].id]  # only the one not muted
    fixed = _stream(scaling_type=ScalingPolicyType.FIXED_NUM_SEGMENTS)
    assert plan(fixed, old, _traffic(fixed, old, [9000]), SETTINGS, NOW) is None


def test_guards_fail_without_their_protection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each protection above switched off makes its test fail (else the test guards nothing):
    the minimum segment count, the whole-window measurement, the mute and cooldown, one
    contiguous range per scale."""
    from controller_app.workflows import autoscale

    def fails(test: object) -> None:
        with pytest.raises(AssertionError):
            test()  # type: ignore[operator]

    with monkeypatch.context() as patch:  # no minimum: merge everything cold
        real = autoscale.plan_merges
        patch.setattr(autoscale, "plan_merges", lambda o, c, m: real(o, c, 1))
        fails(test_adjacent_cold_segments_merge_never_below_the_minimum)
    with monkeypatch.context() as patch:  # cold without a window's measurement
        fresh = AutoscaleSettings(window_s=0, cooldown_s=30, mute_s=20)
        patch.setattr(
            "tests.controller.test_autoscale.SETTINGS", fresh
        )  # the window (10 s) is what made a fresh measurement not count
        fails(test_cold_needs_a_whole_window_of_measurement)
    with monkeypatch.context() as patch:  # no mute, no cooldown
        patch.setattr(
            "tests.controller.test_autoscale.SETTINGS",
            AutoscaleSettings(window_s=10, cooldown_s=0, mute_s=0),
        )
        fails(test_mute_cooldown_and_fixed_policies)
    with monkeypatch.context() as patch:  # every hot segment at once, gaps or not
        patch.setattr(autoscale, "_runs", lambda ordered, chosen: [
            [s for s in ordered if s.id in chosen]
        ])  # fmt: skip
        fails(test_one_scale_replaces_one_contiguous_range)
