"""Retention, watermarks and bucket leases called directly against a real segment store.

The rounds take ``now`` from the test where time matters (retention by time), so each
decision is checked exactly; the truncation they request is carried out by ``run_truncate``
as the worker would. ``tests/acceptance/test_stream_policies.py`` runs the same through a
node's worker and beat.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from controller_app import selectors as sel
from controller_app.choices import BucketService, StreamState
from controller_app.errors import NoWatermarkError
from controller_app.models import Stream, StreamCutRecord, Watermark
from controller_app.segment_client import segment_store
from controller_app.workflows import buckets, marks, reader_groups, retention, scopes, streams
from controller_app.workflows import truncate as truncate_workflow
from controller_app.workflows.config import StreamConfig
from controller_app.workflows.reader_groups import ReaderGroupConfig
from tests.controller.invariants import check_stream

pytestmark = pytest.mark.django_db

PERIOD_MS = 1000
EVENT = b"x" * 92  # 100 bytes with its 8-byte header


@pytest.fixture
def sc(registered_node) -> str:
    """A scope of this test's own (the segment store outlives each test's database)."""
    return f"sc{uuid.uuid4().hex[:12]}"


def _stream(sc: str, **config) -> Stream:
    scopes.create_scope(sc)
    return streams.create_stream(segment_store(), sc, "st", StreamConfig(**config))


def _write(wire, stream: Stream, count: int) -> None:
    """``count`` events of 100 bytes into the stream's only segment."""
    (segment,) = sel.current_segments(stream)
    writer = uuid.uuid4()
    name = sel.segment_name(stream, segment.id)
    wire.setup_append(name, writer)
    wire.append_block(writer, [EVENT] * count).result(10)


def _round(stream: Stream, now: int) -> dict[int, int] | None:
    """One retention round at ``now``, its truncation carried out as the worker would."""
    fresh = sel.get_stream(stream.scope.name, stream.name)
    cut = retention.apply_retention(segment_store(), fresh, PERIOD_MS, now=now)
    if cut is not None:
        assert sel.get_stream(stream.scope.name, stream.name).state == StreamState.TRUNCATING
        truncate_workflow.run_truncate(segment_store(), stream.pk)
    return cut


def _head(stream: Stream) -> int:
    """The offset of the head in the stream's only segment."""
    ((_, offset),) = sel.head_segments(sel.get_stream(stream.scope.name, stream.name)).items()
    return offset


# -- retention ----------------------------------------------------------------------------------


def test_size_retention_truncates_exactly_where_the_policy_says(sc: str, wire) -> None:
    """SIZE 1,000 bytes: truncate at the newest collected cut with at least 1,000 bytes after
    it, never closer to the tail, and the head only moves forward."""
    stream = _stream(sc, retention_type="SIZE", retention_value=1000)
    now = 1_000_000
    # Each round collects the tail (0, 500, 1000, 1500, 2000 bytes) and truncates at the
    # newest cut with at least 1,000 bytes after it (none, none, the head itself, 500, 1000).
    for expected in (None, None, None, 500, 1000):
        cut = _round(stream, now)
        assert (None if cut is None else next(iter(cut.values()))) == expected
        assert _head(stream) == (expected or _head(stream))
        _write(wire, stream, 5)
        now += PERIOD_MS
    cut = _round(stream, now)  # collects 2500: the newest with >= 1000 after it is 1500
    assert cut is not None and list(cut.values()) == [1500]
    assert _head(stream) == 1500
    assert segment_store().info(sel.segment_name(stream, next(iter(cut)))).start_offset == 1500
    assert _round(stream, now + PERIOD_MS) is None  # 2500 collected again: nothing newer
    assert _head(stream) == 1500
    # The records behind the head are gone but the newest of them (sizes count from it).
    sizes = sorted(StreamCutRecord.objects.filter(stream=stream).values_list(
        "recording_size", flat=True))  # fmt: skip
    assert sizes[0] == 1500
    assert check_stream(sel.get_stream(sc, "st")) == []


def test_time_retention_keeps_what_is_younger_than_the_period(sc: str, wire) -> None:
    stream = _stream(sc, retention_type="TIME", retention_value=2500)
    now = 5_000_000
    for _ in range(4):  # cuts at t0 (0 B), t0+1s (100 B), t0+2s (200 B), t0+3s (300 B)
        assert _round(stream, now) is None
        _write(wire, stream, 1)
        now += PERIOD_MS
    # Now t0+4s: 2.5 s ago is t0+1.5s, the newest cut at or before it is t0+1s (100 B).
    cut = _round(stream, now)
    assert cut is not None and list(cut.values()) == [100]
    assert _head(stream) == 100
    assert _round(stream, now + 400) is None  # t0+4.4s: still t0+1s
    cut = _round(stream, now + 600)  # t0+4.6s: 2.5 s ago is t0+2.1s: the t0+2s cut
    assert cut is not None and list(cut.values()) == [200]


def test_a_subscriber_holds_truncation_back_until_the_maximum(sc: str, wire) -> None:
    """SIZE min 100, max 400: a subscriber at 100 holds the head there while the stream keeps
    at most 400 bytes after it; past that, truncation goes on anyway."""
    stream = _stream(sc, retention_type="SIZE", retention_value=100, retention_max=400)
    config = ReaderGroupConfig(
        streams={f"{sc}/st": "head"}, retention_type="MANUAL_RELEASE_AT_USER_STREAMCUT"
    )
    reader_groups.create_reader_group(segment_store(), sc, "rg", config)
    (segment,) = sel.current_segments(stream)
    now = 1_000_000
    for _ in range(4):  # cuts at 0, 100, 200, 300
        _round(stream, now)
        _write(wire, stream, 1)
        now += PERIOD_MS
    assert _head(stream) == 0  # the subscriber reported nothing yet: all held
    reader_groups.update_subscriber_cuts(sc, "rg", {f"{sc}/st": {segment.id: 100}})
    assert list(_round(stream, now).values()) == [100]  # collects 400; min allows 300
    now += PERIOD_MS
    assert _round(stream, now) is None  # held at the subscriber's 100 (400 kept)
    _write(wire, stream, 2)  # 600 written: 500 after the subscriber's cut > max 400
    now += PERIOD_MS
    assert list(_round(stream, now).values()) == [200]  # the newest leaving >= 400: 200
    reader_groups.update_subscriber_cuts(sc, "rg", {f"{sc}/st": {segment.id: 600}})
    now += PERIOD_MS
    assert list(_round(stream, now).values()) == [400]  # ahead of min: min (400 = 500-100)


def test_no_policy_no_retention(sc: str, wire) -> None:
    stream = _stream(sc)
    _write(wire, stream, 3)
    assert retention.apply_retention(segment_store(), stream, PERIOD_MS, now=10**9) is None
    assert not StreamCutRecord.objects.filter(stream=stream).exists()


# -- watermarks ---------------------------------------------------------------------------------


def test_watermarks_bound_live_writers_and_only_move_forward(sc: str) -> None:
    stream = _stream(sc, min_segments=2, timestamp_aggregation_timeout=60_000)
    low, high = sel.current_segments(stream)
    with pytest.raises(NoWatermarkError):
        marks.latest_watermark(sc, "st")
    marks.note_writer_mark(sc, "st", "a", 1000, {low.id: 50})
    marks.note_writer_mark(sc, "st", "b", 3000, {high.id: 70})
    first = marks.compute_watermark(stream)
    assert first is not None
    assert (first.low_time, first.high_time) == (1000, 3000)  # never past a live writer's time
    assert first.stream_cut == {str(low.id): 50, str(high.id): 70}
    assert marks.compute_watermark(stream) is None  # nothing moved: no new watermark
    marks.note_writer_mark(sc, "st", "b", 4000, {high.id: 90})
    assert marks.compute_watermark(stream) is None  # writer a still holds the lower bound
    marks.note_writer_mark(sc, "st", "a", 2000, {low.id: 10})  # a position behind the last
    second = marks.compute_watermark(stream)
    assert second is not None and second.number == 2
    assert (second.low_time, second.high_time) == (2000, 4000)
    assert second.stream_cut == {str(low.id): 50, str(high.id): 90}  # the cut never goes back
    assert marks.latest_watermark(sc, "st").number == 2


def test_a_stopped_writer_stops_holding_watermarks_after_its_timeout(sc: str) -> None:
    stream = _stream(sc, timestamp_aggregation_timeout=300)
    (segment,) = sel.current_segments(stream)
    marks.note_writer_mark(sc, "st", "stopped", 1000, {segment.id: 10})
    marks.note_writer_mark(sc, "st", "live", 5000, {segment.id: 20})
    assert marks.compute_watermark(stream).low_time == 1000
    time.sleep(0.35)
    marks.note_writer_mark(sc, "st", "live", 6000, {segment.id: 30})
    later = marks.compute_watermark(stream)
    assert later is not None and (later.low_time, later.high_time) == (6000, 6000)
    marks.note_writer_mark(sc, "st", "stopped", 7000, {segment.id: 40})  # back: live again
    time.sleep(0.01)
    assert marks.compute_watermark(stream) is None  # 6000 is its lower bound: not forward


def test_one_watermark_round_over_many_streams_takes_a_fixed_number_of_queries(
    sc: str, django_assert_max_num_queries: Any
) -> None:
    scopes.create_scope(sc)
    made = []
    for i in range(20):
        stream = streams.create_stream(segment_store(), sc, f"s{i}", StreamConfig())
        (segment,) = sel.current_segments(stream)
        marks.note_writer_mark(sc, f"s{i}", "w", 1000 + i, {segment.id: i})
        made.append(stream)
    with django_assert_max_num_queries(6):
        found = marks.compute_watermarks(made)
    assert sorted(w.low_time for w in found) == [1000 + i for i in range(20)]
    assert all(marks.latest_watermark(sc, f"s{i}").number == 1 for i in range(20))


def test_watermark_cut_follows_a_scale(sc: str) -> None:
    """A writer still on a sealed segment and one on its successors: the cut is the upper
    bound, the successors (after all of the sealed one's data) at their offsets."""
    from controller_app.workflows import scale

    stream = _stream(sc)
    (old,) = sel.current_segments(stream)
    marks.note_writer_mark(sc, "st", "old", 1000, {old.id: 0})
    scale.scale_stream(sc, "st", [old.id], [(0.0, 0.5), (0.5, 1.0)], wait=None)
    scale.run_scale(segment_store(), stream.pk)
    stream = sel.get_stream(sc, "st")
    left, right = sel.current_segments(stream)
    marks.note_writer_mark(sc, "st", "new", 2000, {left.id: 5})
    found = marks.compute_watermark(stream)
    assert found is not None
    assert found.stream_cut == {str(left.id): 5, str(right.id): 0}
    assert sel.is_stream_cut_valid(stream, {left.id: 5, right.id: 0})
    assert Watermark.objects.filter(stream=stream).count() == 1


# -- bucket leases ------------------------------------------------------------------------------


def test_a_bucket_is_run_by_one_round_at_a_time() -> None:
    service = BucketService.RETENTION
    first = buckets.acquire(service, 7, 60_000)
    assert first is not None
    assert buckets.acquire(service, 7, 60_000) is None  # held
    assert buckets.acquire(service, 8, 60_000) is not None  # another bucket
    buckets.release(service, 7, first)
    assert buckets.acquire(service, 7, 1) is not None  # free again
    time.sleep(0.01)
    assert buckets.acquire(service, 7, 60_000) is not None  # that lease expired


def test_run_bucket_visits_its_streams_and_survives_a_failing_one(sc: str) -> None:
    scopes.create_scope(sc)
    made = [streams.create_stream(segment_store(), sc, f"s{i}", StreamConfig()) for i in range(3)]
    by_bucket: dict[int, list[str]] = {}
    for stream in made:
        bucket = stream.buckets.get(service=BucketService.WATERMARKING).bucket
        by_bucket.setdefault(bucket, []).append(stream.name)
    bucket, names = next(iter(by_bucket.items()))
    seen: list[str] = []

    def visit(stream: Stream) -> None:
        seen.append(stream.name)
        raise RuntimeError("boom")  # logged; the round goes on

    everything = Stream.objects.filter(scope__name=sc)
    assert buckets.run_bucket(BucketService.WATERMARKING, bucket, 60_000, everything, visit) == (
        len(names)
    )
    assert sorted(seen) == sorted(names)
    held = buckets.acquire(BucketService.WATERMARKING, bucket, 60_000)
    assert held is not None  # released after the round
    assert buckets.run_bucket(BucketService.WATERMARKING, bucket, 60_000, everything, visit) == -1


# -- each guard above, with its protection switched off, must fail --------------------------------


def _fails(test: Any, *args: Any) -> None:
    """``test`` run with a protection switched off must fail (else it guards nothing)."""
    with pytest.raises(AssertionError):
        test(*args)


def test_guards_fail_without_their_protection(
    sc: str, wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:  # subscribers ignored
        patch.setattr(retention, "_lowest_subscriber_cut", lambda stream, head: None)
        _fails(test_a_subscriber_holds_truncation_back_until_the_maximum, sc + "a", wire)
    with monkeypatch.context() as patch:  # the policy's minimum ignored: truncate at the tail
        patch.setattr(
            retention, "_newest_keeping",
            lambda stream, keep, now, size: StreamCutRecord.objects.filter(stream=stream)
            .order_by("-recording_time").first(),
        )  # fmt: skip
        _fails(test_size_retention_truncates_exactly_where_the_policy_says, sc + "b", wire)
    with monkeypatch.context() as patch:  # the watermark's window from the newest time only
        patch.setattr(marks, "min", max, raising=False)
        _fails(test_watermarks_bound_live_writers_and_only_move_forward, sc + "c")
    with monkeypatch.context() as patch:  # writers never time out
        patch.setattr(
            marks,
            "_live_since",
            lambda stream: marks.dt.datetime.min.replace(tzinfo=marks.dt.timezone.utc),
        )
        _fails(test_a_stopped_writer_stops_holding_watermarks_after_its_timeout, sc + "d")
    with monkeypatch.context() as patch:  # a lease that is always free
        real = buckets.BucketLease.objects.filter

        def free(*args: Any, **kwargs: Any) -> Any:
            kwargs.pop("expires_ms__lte", None)
            return real(*args, **kwargs)

        patch.setattr(buckets.BucketLease.objects, "filter", free)
        _fails(test_a_bucket_is_run_by_one_round_at_a_time)
