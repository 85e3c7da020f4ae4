"""Retention: collect a stream cut each period, truncate at the newest one the policy allows.

Each round of a stream with a retention policy (Pravega's retention infrastructure):

1. **Collect**: the tail as a stream cut, with the stream's size up to it and the time, joins
   the stream's retention set (``StreamCutRecord``). A round that comes less than half a period
   after the last record collects nothing (a retried or doubled task records once).
2. **Choose**: ``min`` is the newest record that leaves at least the policy's value behind it
   (``TIME``: recorded at least ``retention_value`` ms ago; ``SIZE``: at least
   ``retention_value`` bytes written after it); ``max`` the newest that leaves at least
   ``retention_max`` (none while the maximum is unbounded). Without subscribers the stream is
   truncated at ``min``. A stream read by reader groups with consumption-based retention
   (``Subscriber`` rows) is truncated no further than their lowest reported cut, nor further
   than ``min``, unless that cut keeps more than the maximum: then at ``max`` anyway
   (Pravega's rule; the subscriber's reader is told its data was truncated).
3. **Truncate** through the truncate workflow (so it serializes with scale, seal and the
   other workflows, and the head only moves forward), then forget the records behind the new
   head but the newest one (the reference ``size_till_stream_cut`` counts from).

A stream busy with another workflow is left for the next round.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from controller_app import audit
from controller_app import selectors as sel
from controller_app.choices import RetentionPolicyType, StreamState
from controller_app.errors import (
    ControllerError,
    InvalidStreamCutError,
    PreconditionFailedError,
    WorkflowTimeoutError,
)
from controller_app.models import Stream, StreamCutRecord, Subscriber
from controller_app.models.stream import RETENTION_MAX_DEFAULT
from controller_app.ports import SegmentStorePort
from controller_app.segments import CutOrder, encode_stream_cut
from controller_app.stream_reads import tail_cut
from controller_app.workflows.common import now_ms
from controller_app.workflows.truncate import truncate_stream

log = logging.getLogger(__name__)

Cut = dict[int, int]
_AT_OR_BEFORE = (CutOrder.BEFORE, CutOrder.EQUAL)


def collect_cut(
    store: SegmentStorePort, stream: Stream, now: int, period_ms: int
) -> StreamCutRecord | None:
    """Add the tail to the stream's retention set, unless a record is younger than half a
    period; the newest record then (``None`` while the set is empty)."""
    latest = StreamCutRecord.objects.filter(stream=stream).order_by("-recording_time").first()
    if latest is not None and now - latest.recording_time < period_ms // 2:
        return latest
    tail = tail_cut(store, stream)
    cut = {s.id: offset for s, offset in tail.items()}
    size = sel.size_till_stream_cut(stream, cut)
    if latest is not None and size < latest.recording_size:
        return latest  # a stale read of the tail: sizes never go back
    record, _ = StreamCutRecord.objects.get_or_create(
        stream=stream,
        recording_time=now,
        defaults={
            "recording_size": size,
            "stream_cut": encode_stream_cut(cut),
            "span_high_epoch": max(s.creation_epoch for s in tail),
        },
    )
    return record


def _newest_keeping(stream: Stream, keep: int, now: int, size: int) -> StreamCutRecord | None:
    """The newest record that leaves at least ``keep`` (ms or bytes, by the policy) after it."""
    records = StreamCutRecord.objects.filter(stream=stream)
    if stream.retention_type == RetentionPolicyType.TIME:
        if keep > now:
            return None
        records = records.filter(recording_time__lte=now - keep)
    else:
        if keep > size:
            return None
        records = records.filter(recording_size__lte=size - keep)
    return records.order_by("-recording_time").first()


def _lowest_subscriber_cut(stream: Stream, head: Cut) -> Cut | None:
    """The lowest cut the stream's subscribers reported; ``head`` when one has not reported
    yet or two of them overlap (no single cut is behind both: hold everything). ``None``
    without subscribers."""
    cuts = [
        {int(k): int(v) for k, v in cut.items()}
        for cut in Subscriber.objects.filter(stream=stream).values_list("stream_cut", flat=True)
    ]
    if not cuts:
        return None
    lowest = cuts[0]
    for cut in cuts:
        if not cut:
            return head
        try:
            order = sel.compare_stream_cuts(stream, cut, lowest)
        except InvalidStreamCutError:
            return head  # a cut of segments gone from the metadata: hold everything
        if order == CutOrder.OVERLAPPING:
            return head
        if order == CutOrder.BEFORE:
            lowest = cut
    return lowest


def truncation_point(stream: Stream, now: int, latest: StreamCutRecord, head: Cut) -> Cut | None:
    """Where the policy says to truncate the stream now (see the module docstring), or
    ``None``; ``latest``: the newest record of its retention set, ``head``: its head."""
    size = latest.recording_size
    low = _newest_keeping(stream, stream.retention_value, now, size)
    if low is None:
        return None
    min_cut = low.cut_ids()
    high = None
    if stream.retention_max < RETENTION_MAX_DEFAULT:
        high = _newest_keeping(stream, max(stream.retention_max, stream.retention_value), now, size)
    max_cut = high.cut_ids() if high is not None else None
    subscribed = _lowest_subscriber_cut(stream, head)
    if subscribed is None:
        return min_cut
    if sel.compare_stream_cuts(stream, min_cut, subscribed) in _AT_OR_BEFORE:
        return min_cut
    if max_cut is not None and (
        sel.compare_stream_cuts(stream, subscribed, max_cut) in _AT_OR_BEFORE
    ):
        return max_cut  # the subscribers keep more than the maximum: truncate anyway
    if sel.compare_stream_cuts(stream, subscribed, min_cut) == CutOrder.BEFORE:
        return subscribed
    return max_cut


def forget_behind(stream: Stream, cut: Mapping[int, int]) -> int:
    """Delete the retention records behind ``cut`` but the newest of them."""
    size = sel.size_till_stream_cut(stream, cut)
    newest = (
        StreamCutRecord.objects.filter(stream=stream, recording_size__lte=size)
        .order_by("-recording_time")
        .first()
    )
    if newest is None:
        return 0
    deleted, _ = StreamCutRecord.objects.filter(
        stream=stream, recording_time__lt=newest.recording_time
    ).delete()
    return deleted


def apply_retention(
    store: SegmentStorePort, stream: Stream, period_ms: int, now: int | None = None
) -> Cut | None:
    """One retention round of ``stream``: collect, choose, truncate (the module docstring).
    The cut truncated at, or ``None``."""
    if stream.retention_type == RetentionPolicyType.NONE or stream.state != StreamState.ACTIVE:
        return None
    now = now_ms() if now is None else now
    latest = collect_cut(store, stream, now, period_ms)
    if latest is None:
        return None
    head = {s.id: o for s, o in sel.head_segments(stream).items()}
    target = truncation_point(stream, now, latest, head)
    if target is None:
        return None
    if sel.compare_stream_cuts(stream, head, target) != CutOrder.BEFORE:
        return None  # the head is there already (truncation never moves back)
    try:
        truncate_stream(store, stream.scope.name, stream.name, target, wait=None)
    except (PreconditionFailedError, WorkflowTimeoutError) as exc:
        log.info("retention of %s waits for the next round: %s", stream, exc)
        return None
    except ControllerError as exc:
        log.warning("retention of %s could not truncate at %s: %s", stream, target, exc)
        return None
    forget_behind(stream, target)
    audit.record(
        "stream.truncate", stream.scoped_name, username="system:retention", source="workflow",
        detail=f"retention ({stream.retention_type}) at {target}",
    )  # fmt: skip
    return target
