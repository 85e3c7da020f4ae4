"""Writer marks and watermarks: a writer reports its time and position (``note_writer_mark``);
the periodic watermark job reduces the live writers' marks of a stream into a watermark
(``compute_watermark``); readers ask for the newest (``latest_watermark``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from django.db import IntegrityError
from django.utils import timezone

from controller_app import selectors as sel
from controller_app.errors import InvalidArgumentError, InvalidStreamCutError, NoWatermarkError
from controller_app.models import Stream, Watermark, WriterMark
from controller_app.segments import (
    Segment,
    decode_stream_cut,
    encode_stream_cut,
    keyspace_gap,
    overlay,
)
from controller_app.workflows.common import get_stream

WRITER_ID_LENGTH_MAX = 64


def note_writer_mark(
    scope: str, name: str, writer_id: str, timestamp: int, position: Mapping[int, int]
) -> WriterMark:
    """Record that ``writer_id`` wrote everything up to ``timestamp`` (ms) by ``position``.

    Times never go back: an older report than the stored one is ignored.
    """
    if not writer_id or len(writer_id) > WRITER_ID_LENGTH_MAX:
        raise InvalidArgumentError(f"writer id must be 1 to {WRITER_ID_LENGTH_MAX} characters")
    if timestamp < 0:
        raise InvalidArgumentError("timestamp must not be negative")
    stream = get_stream(scope, name)
    cut = {int(k): int(v) for k, v in position.items()}
    for segment_id, offset in cut.items():
        sel.segment_record(stream, segment_id)  # SegmentNotFoundError for a foreign segment
        if offset < 0:
            raise InvalidArgumentError(f"offset {offset} of segment {segment_id} is negative")
    mark, created = WriterMark.objects.get_or_create(
        stream=stream,
        writer_id=writer_id,
        defaults={"timestamp": timestamp, "position": encode_stream_cut(cut)},
    )
    if not created and timestamp >= mark.timestamp:
        WriterMark.objects.filter(pk=mark.pk, timestamp__lte=timestamp).update(
            timestamp=timestamp,
            position=encode_stream_cut(cut),
            is_alive=True,
            updated_at=timezone.now(),  # (update() leaves auto_now fields alone)
        )
        mark.refresh_from_db()
    return mark


#: How long a writer that stopped reporting holds the watermark back, when the stream sets no
#: ``timestampAggregationTimeout`` (ms).
WRITER_TIMEOUT_DEFAULT_MS = 60_000
#: Watermarks kept per stream (older ones are deleted as new ones come).
WATERMARKS_KEPT = 100


def _upper_bound(stream: Stream, cuts: list[dict[int, int]]) -> dict[Segment, int] | None:
    """The lowest stream cut at or after every position in ``cuts``: each segment at the
    highest offset reported for it, and where the stream has moved on since (a newer segment
    overlaps it), the newer segments of the current epoch at offset 0, which are after all of
    the older one's data. ``None`` if the positions are no longer valid."""
    merged: dict[int, int] = {}
    for cut in cuts:
        for segment_id, offset in cut.items():
            merged[segment_id] = max(offset, merged.get(segment_id, 0))
    try:
        positions = sel.validate_reading_position(stream, merged)
    except InvalidStreamCutError:
        return None
    epoch = (
        sel.current_segments(stream)
        or sel.epoch_record(stream, stream.current_epoch).segment_list()
    )
    bound = overlay(epoch, positions)
    return bound if keyspace_gap(bound) is None else None


def _live_since(stream: Stream) -> dt.datetime:
    """A writer is live while it reported after this."""
    timeout = stream.timestamp_aggregation_timeout or WRITER_TIMEOUT_DEFAULT_MS
    return timezone.now() - dt.timedelta(milliseconds=timeout)


def compute_watermark(stream: Stream) -> Watermark | None:
    """Reduce the marks of the stream's live writers into a new watermark (Pravega's periodic
    watermarking); the new one, or ``None`` when it would not move forward.

    A writer whose last report is older than the stream's ``timestampAggregationTimeout``
    (else ``WRITER_TIMEOUT_DEFAULT_MS``) is no longer live and holds nothing back; it is live
    again once it reports. The window is ``[lowest, highest]`` of the live writers' times, so
    the lower bound never passes a live writer's time; the stream cut is the upper bound of
    their positions and of the previous watermark's cut. A watermark is added only when its
    lower bound is later than the previous one's: both bounds and the cut only move forward.
    """
    horizon = _live_since(stream)
    marks = WriterMark.objects.filter(stream=stream, is_alive=True)
    marks.filter(updated_at__lt=horizon).update(is_alive=False)
    live = list(marks.filter(updated_at__gte=horizon).values_list("timestamp", "position"))
    if not live:
        return None
    previous = Watermark.objects.filter(stream=stream).order_by("-number").first()
    low = min(timestamp for timestamp, _ in live)
    high = max(timestamp for timestamp, _ in live)
    if previous is not None:
        if low <= previous.low_time:
            return None
        high = max(high, previous.high_time)
    cuts = [decode_stream_cut(position) for _, position in live]
    if previous is not None:
        cuts.append(decode_stream_cut(previous.stream_cut))
    bound = _upper_bound(stream, cuts)
    if bound is None:
        return None
    number = previous.number + 1 if previous is not None else 1
    try:
        watermark = Watermark.objects.create(
            stream=stream, number=number, low_time=low, high_time=high,
            stream_cut=encode_stream_cut({s.id: o for s, o in bound.items()}),
        )  # fmt: skip
    except IntegrityError:  # another round made this number meanwhile
        return None
    Watermark.objects.filter(stream=stream, number__lte=number - WATERMARKS_KEPT).delete()
    return watermark


def latest_watermark(scope: str, name: str) -> Watermark:
    """The stream's newest watermark, or ``NoWatermarkError`` while it has none."""
    stream = get_stream(scope, name)
    watermark = Watermark.objects.filter(stream=stream).order_by("-number").first()
    if watermark is None:
        raise NoWatermarkError(f"stream {scope}/{name} has no watermark yet")
    return watermark
