"""Selectors on a small scripted history: two segments, a split, a merge, a truncation.

    epoch 0 (t=1,000,000)  s0 [0, .5)   s1 [.5, 1)
    epoch 1 (t=1,001,000)  s0           s2 [.5, .75)  s3 [.75, 1)     (s1 split)
    epoch 2 (t=1,002,000)  s0           s4 [.5, 1)                    (s2, s3 merged)
    truncated at {s0: 50, s2: 10, s3: 20}

Sizes at sealing: 1000 * (number + 1), so s1 = 2000, s2 = 3000, s3 = 4000.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from controller_app import selectors as sel
from controller_app.choices import StreamState
from controller_app.errors import (
    InvalidStreamCutError,
    NoNodeForSegmentError,
    SegmentNotFoundError,
)
from controller_app.models import Stream
from controller_app.segments import CutOrder, Segment
from millrace.kernel.naming import container_for, qualified_segment_name
from tests.controller import factories as f
from tests.controller.history import START_TIME, History

pytestmark = pytest.mark.django_db


@dataclass
class Script:
    stream: Stream
    history: History
    s0: Segment
    s1: Segment
    s2: Segment
    s3: Segment
    s4: Segment


@pytest.fixture
def script() -> Script:
    stream = f.StreamFactory(scope__name="sc", name="st", state=StreamState.CREATING)
    h = History(stream)
    s0, s1 = h.current
    s2, s3 = h.split(s1.id)
    s4 = h.merge([s2.id, s3.id])
    h.truncate({s0.id: 50, s2.id: 10, s3.id: 20}, deleted=[s1.id])
    h.save()
    return Script(sel.get_stream("sc", "st"), h, s0, s1, s2, s3, s4)


def _ids(segments: object) -> list[int]:
    return sorted(s.id for s in segments)  # type: ignore[attr-defined]


def test_get_stream(script: Script) -> None:
    assert (script.stream.scoped_name, script.stream.current_epoch) == ("sc/st", 2)
    with pytest.raises(Stream.DoesNotExist):
        sel.get_stream("sc", "nope")


def test_current_segments(script: Script) -> None:
    tail = sel.current_segments(script.stream)
    assert tail == (script.s0, script.s4)
    assert tail[-1].key_end == 1.0
    assert [(s.key_start, s.key_end) for s in tail] == [(0.0, 0.5), (0.5, 1.0)]


def test_current_segments_follow_the_stored_tail_and_are_empty_once_sealed(
    script: Script,
) -> None:
    stale = script.stream
    Stream.objects.filter(pk=stale.pk).update(current_epoch=1)
    assert _ids(sel.current_segments(stale)) == _ids([script.s0, script.s2, script.s3])
    Stream.objects.filter(pk=stale.pk).update(state=StreamState.SEALED)
    assert sel.current_segments(stale) == ()


def test_head_is_the_latest_truncation(script: Script) -> None:
    assert sel.head_segments(script.stream) == {script.s0: 50, script.s2: 10, script.s3: 20}
    script.history.truncate({script.s0.id: 60, script.s4.id: 7})
    script.history.truncations[-1].save()
    assert sel.head_segments(script.stream) == {script.s0: 60, script.s4: 7}


def test_head_of_a_never_truncated_stream_is_epoch_zero() -> None:
    stream = f.StreamFactory()
    h = History(stream, segments=3)
    h.split(h.current[0].id)
    h.save()
    head = sel.head_segments(stream)
    assert head == dict.fromkeys(h.epochs[0].segment_list(), 0)
    assert max(s.key_end for s in head) == 1.0


@pytest.mark.parametrize(
    ("timestamp", "epoch"),
    [
        (0, 0),
        (START_TIME - 1, 0),
        (START_TIME, 0),
        (START_TIME + 999, 0),
        (START_TIME + 1000, 1),
        (START_TIME + 1500, 1),
        (START_TIME + 2000, 2),
        (10**15, 2),
    ],
)
def test_epoch_at_time(script: Script, timestamp: int, epoch: int) -> None:
    assert sel.epoch_at_time(script.stream, timestamp).epoch == epoch


def test_epoch_at_time_never_passes_the_current_epoch(script: Script) -> None:
    Stream.objects.filter(pk=script.stream.pk).update(current_epoch=1)  # a scale in flight
    assert sel.epoch_at_time(script.stream, 10**15).epoch == 1


def test_segments_at_time(script: Script) -> None:
    s = script
    head = {s.s0: 50, s.s2: 10, s.s3: 20}
    assert sel.segments_at_time(s.stream, 0) == head
    assert sel.segments_at_time(s.stream, START_TIME + 1500) == head
    assert sel.segments_at_time(s.stream, START_TIME + 2000) == {s.s0: 50, s.s4: 0}


def test_segments_at_time_without_truncation() -> None:
    stream = f.StreamFactory()
    h = History(stream)
    a, b = h.current
    c, d = h.split(b.id)
    h.save()
    assert sel.segments_at_time(stream, 0) == {a: 0, b: 0}
    assert sel.segments_at_time(stream, START_TIME + 1000) == {a: 0, c: 0, d: 0}


def test_successors(script: Script) -> None:
    s = script
    assert sel.successors(s.stream, s.s1.id) == {s.s2: [s.s1.id], s.s3: [s.s1.id]}
    assert sel.successors(s.stream, s.s2.id) == {s.s4: [s.s2.id, s.s3.id]}
    assert sel.successors(s.stream, s.s3.id) == {s.s4: [s.s2.id, s.s3.id]}
    assert sel.successors(s.stream, s.s0.id) == {}
    assert sel.successors(s.stream, s.s4.id) == {}
    successor = next(iter(sel.successors(s.stream, s.s1.id)))
    assert successor.key_start == 0.5 and successor.creation_time == START_TIME + 1000
    with pytest.raises(SegmentNotFoundError):
        sel.successors(s.stream, 99)


def test_predecessors(script: Script) -> None:
    s = script
    assert sel.predecessors(s.stream, s.s4.id) == [s.s2, s.s3]
    assert sel.predecessors(s.stream, s.s2.id) == [s.s1]
    assert sel.predecessors(s.stream, s.s3.id) == [s.s1]
    assert sel.predecessors(s.stream, s.s0.id) == []
    assert sel.predecessors(s.stream, s.s1.id) == []
    with pytest.raises(SegmentNotFoundError):
        sel.predecessors(s.stream, (2 << 32) | 3)


def test_successors_across_a_rolling_transaction() -> None:
    """A transaction of epoch 0 committed after a split: epochs 2 and 3 duplicate 0 and 1."""
    stream = f.StreamFactory()
    h = History(stream)
    a, b = h.current
    c, d = h.split(b.id)
    h.roll(txn_epoch=0)
    h.save()
    a2, b2 = h.epochs[2].segment_list()
    a3, c3, d3 = h.epochs[3].segment_list()
    assert (a2.number, a2.creation_epoch, b2.number, c3.number) == (0, 2, 1, 2)
    assert h.epochs[2].reference_epoch == 0 and h.epochs[3].reference_epoch == 1
    assert sel.successors(stream, c.id) == {b2: [c.id, d.id]}
    assert sel.successors(stream, a.id) == {a2: [a.id]}
    assert sel.successors(stream, b2.id) == {c3: [b2.id], d3: [b2.id]}
    assert sel.predecessors(stream, a3.id) == [a2]
    assert sel.current_segments(stream) == (a3, c3, d3)


def test_segments_between(script: Script) -> None:
    s = script
    everything = [s.s0, s.s1, s.s2, s.s3, s.s4]
    start = {s.s0.id: 0, s.s1.id: 0}
    end = {s.s0.id: 70, s.s4.id: 5}
    assert sel.segments_between(s.stream, start, end) == everything
    assert sel.segments_between(s.stream) == [s.s0, s.s2, s.s3, s.s4]  # head to tail
    assert sel.segments_between(s.stream, start, {s.s0.id: 1, s.s2.id: 0, s.s3.id: 0}) == [
        s.s0,
        s.s1,
        s.s2,
        s.s3,
    ]
    assert sel.segments_between(s.stream, end, end) == [s.s0, s.s4]
    with pytest.raises(InvalidStreamCutError, match="not at or before"):
        sel.segments_between(s.stream, end, start)


def test_segments_between_spans_only_the_epochs_in_between() -> None:
    """The lower segment is in every cut; the span still starts at the cut's epoch."""
    stream = f.StreamFactory()
    h = History(stream)
    low = h.current[0]
    for _ in range(3):
        h.split(h.current[1].id)
        h.merge([x.id for x in h.current[1:]])
    start = h.cut(0)
    h.split(h.current[1].id)
    end = h.cut(0)
    h.save()
    result = sel.segments_between(stream, start, end)
    assert result == sorted({low, *h.records_for(start), *h.records_for(end)}, key=lambda x: x.id)


def test_stream_cut_validity(script: Script) -> None:
    s = script
    valid = [
        {s.s0.id: 0, s.s1.id: 0},
        {s.s0.id: 3, s.s2.id: 3000, s.s3.id: 0},
        {s.s0.id: 9, s.s4.id: 10**12},
    ]
    for cut in valid:
        assert sel.is_stream_cut_valid(s.stream, cut), cut
    invalid = {
        "empty": {},
        "gap": {s.s0.id: 0},
        "overlap": {s.s0.id: 0, s.s1.id: 0, s.s2.id: 0},
        "unknown": {s.s0.id: 0, 77: 0},
        "negative": {s.s0.id: -1, s.s4.id: 0},
        "beyond sealed size": {s.s0.id: 0, s.s2.id: 3001, s.s3.id: 0},
    }
    for why, cut in invalid.items():
        assert not sel.is_stream_cut_valid(s.stream, cut), why
    with pytest.raises(InvalidStreamCutError, match=r"\[0.5, 1.0\) is not covered"):
        sel.validate_stream_cut(s.stream, {s.s0.id: 0})
    assert sel.validate_stream_cut(s.stream, valid[0]) == {s.s0: 0, s.s1: 0}


def test_compare_stream_cuts(script: Script) -> None:
    s = script
    early = {s.s0.id: 0, s.s1.id: 0}
    middle = {s.s0.id: 10, s.s2.id: 0, s.s3.id: 0}
    late = {s.s0.id: 20, s.s4.id: 0}
    assert sel.compare_stream_cuts(s.stream, early, late) is CutOrder.BEFORE
    assert sel.compare_stream_cuts(s.stream, late, middle) is CutOrder.AFTER
    assert sel.compare_stream_cuts(s.stream, middle, dict(middle)) is CutOrder.EQUAL
    assert sel.compare_stream_cuts(s.stream, {s.s0.id: 30, s.s1.id: 0}, middle) is (
        CutOrder.OVERLAPPING
    )
    with pytest.raises(InvalidStreamCutError):
        sel.compare_stream_cuts(s.stream, early, {s.s0.id: 0})


def test_size_till_stream_cut_from_the_start(script: Script) -> None:
    s = script
    assert sel.size_till_stream_cut(s.stream, {s.s0.id: 0, s.s1.id: 0}) == 0
    assert sel.size_till_stream_cut(s.stream, {s.s0.id: 7, s.s1.id: 100}) == 107
    assert sel.size_till_stream_cut(s.stream, {s.s0.id: 7, s.s2.id: 5, s.s3.id: 0}) == 2012
    assert (
        sel.size_till_stream_cut(s.stream, {s.s0.id: 100, s.s4.id: 30})
        == 100 + 2000 + 3000 + 4000 + 30
    )


def test_size_till_stream_cut_from_a_retention_record(script: Script) -> None:
    s = script
    # A record claiming 1,000,000 bytes up to {s0: 40, s2: 100, s3: 0}: sizes build on it.
    f.StreamCutRecordFactory(
        stream=s.stream,
        recording_size=1_000_000,
        stream_cut={str(s.s0.id): 40, str(s.s2.id): 100, str(s.s3.id): 0},
        span_high_epoch=1,
    )
    assert sel.size_till_stream_cut(s.stream, {s.s0.id: 100, s.s4.id: 30}) == (
        1_000_000 + (100 - 40) + (3000 - 100) + 4000 + 30
    )
    # A cut behind the record in s0 cannot build on it: counted from the start.
    assert sel.size_till_stream_cut(s.stream, {s.s0.id: 10, s.s4.id: 0}) == 10 + 2000 + 3000 + 4000
    # Neither can a cut whose span starts before the record's segments were created.
    assert sel.size_till_stream_cut(s.stream, {s.s0.id: 100, s.s1.id: 5}) == 105


def test_scaling_events(script: Script) -> None:
    s = script
    events = sel.scaling_events(s.stream, 0, 10**15)
    assert [(e.epoch, e.timestamp, e.splits, e.merges) for e in events] == [
        (0, START_TIME, 0, 0),
        (1, START_TIME + 1000, 1, 0),
        (2, START_TIME + 2000, 0, 1),
    ]
    assert events[2].segments == (s.s0, s.s4)
    later = sel.scaling_events(s.stream, START_TIME + 1500, START_TIME + 2000)
    assert [(e.epoch, e.splits, e.merges) for e in later] == [(1, 1, 0), (2, 0, 1)]
    assert [e.epoch for e in sel.scaling_events(s.stream, 0, START_TIME + 1999)] == [0, 1]
    assert [e.epoch for e in sel.scaling_events(s.stream, 0, 10**15, limit=2)] == [0, 1]
    assert sel.scaling_events(s.stream, START_TIME + 5000, START_TIME) == []


def test_segment_names_and_uris(script: Script) -> None:
    s = script
    assert sel.segment_name(s.stream, s.s4.id) == "sc/st/4.#epoch.2"
    nodes = [f.NodeFactory(host=f"10.0.0.{i}", port=12345) for i in range(2)]
    for number in range(4):
        f.ContainerAssignmentFactory(container__number=number, node=nodes[number % 2])
    for seg in (s.s0, s.s4):
        name = qualified_segment_name("sc", "st", seg.id)
        expected = nodes[container_for(name, 4) % 2]
        uri = sel.segment_uri(s.stream, seg.id, 4)
        assert (uri.host, uri.port, str(uri)) == (expected.host, 12345, f"{expected.host}:12345")
    txn_name = f"sc/st/4.#epoch.2#transaction.{'0' * 31}1"
    assert sel.node_uri(txn_name, 4) == sel.segment_uri(s.stream, s.s4.id, 4)
    with pytest.raises(NoNodeForSegmentError):
        sel.segment_uri(s.stream, s.s4.id, 64)


def test_node_uri_counts_the_registered_containers() -> None:
    with pytest.raises(NoNodeForSegmentError, match="no container"):
        sel.node_uri("a/b/0.#epoch.0")
    node = f.NodeFactory()
    for number in range(3):
        f.ContainerAssignmentFactory(container__number=number, node=node)
    assert sel.container_count() == 3
    assert sel.node_uri("a/b/0.#epoch.0") == sel.NodeUri(node.host, node.port)


def test_tags(script: Script) -> None:
    other = f.StreamFactory(scope=script.stream.scope)
    elsewhere = f.StreamFactory()
    for stream in (script.stream, other, elsewhere):
        f.StreamTagFactory(stream=stream, tag="hot")
    f.StreamTagFactory(stream=script.stream, tag="blue")
    assert sel.stream_tags(script.stream) == ["blue", "hot"]
    scope = script.stream.scope
    ordered = sorted([script.stream, other], key=lambda x: x.pk)
    assert sel.streams_with_tag(scope, "hot") == ordered
    assert sel.streams_with_tag(scope, "hot", limit=1) == ordered[:1]
    assert sel.streams_with_tag(scope, "hot", after=ordered[0].pk) == ordered[1:]
    assert sel.streams_with_tag(scope, "cold") == []
