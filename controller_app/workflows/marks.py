"""Writer marks and watermarks: a writer reports its time and position (``note_writer_mark``);
the periodic watermark job reduces the live writers' marks of a stream into a watermark
(``compute_watermark``); readers ask for the newest (``latest_watermark``)."""

from __future__ import annotations

import datetime as dt
import functools
import operator
from collections.abc import Mapping, Sequence

from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from controller_app import selectors as sel
from controller_app.errors import InvalidArgumentError, InvalidStreamCutError, NoWatermarkError
from controller_app.models import Epoch, Stream, Watermark, WriterMark
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


def remove_writer(stream: Stream, writer_id: str) -> bool:
    """Forget a writer's mark (it is done: it no longer holds the stream's watermark back);
    whether it had one."""
    deleted, _ = WriterMark.objects.filter(stream=stream, writer_id=writer_id).delete()
    return deleted > 0


#: How long a writer that stopped reporting holds the watermark back, when the stream sets no
#: ``timestampAggregationTimeout`` (ms).
WRITER_TIMEOUT_DEFAULT_MS = 60_000
#: Watermarks kept per stream (older ones are deleted as new ones come).
WATERMARKS_KEPT = 100


def _upper_bound(
    stream: Stream, cuts: list[dict[int, int]], current: Sequence[Segment]
) -> dict[Segment, int] | None:
    """The lowest stream cut at or after every position in ``cuts``: each segment at the
    highest offset reported for it, and where the stream has moved on since (a newer segment
    overlaps it), the newer segments of the current epoch at offset 0, which are after all of
    the older one's data. ``None`` if the positions are no longer valid. ``current``: the
    segments of the stream's current epoch; when every position is in them, no query."""
    merged: dict[int, int] = {}
    for cut in cuts:
        for segment_id, offset in cut.items():
            merged[segment_id] = max(offset, merged.get(segment_id, 0))
    if current and set(merged) <= {s.id for s in current}:
        return {s: merged.get(s.id, 0) for s in current}
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
    """``compute_watermarks`` of one stream: its new watermark, or ``None``."""
    made = compute_watermarks([stream])
    return made[0] if made else None


def compute_watermarks(streams: Sequence[Stream]) -> list[Watermark]:
    """Reduce the marks of each stream's live writers into a new watermark (Pravega's periodic
    watermarking); the watermarks made (a stream whose watermark would not move gets none).

    A writer whose last report is older than the stream's ``timestampAggregationTimeout``
    (else ``WRITER_TIMEOUT_DEFAULT_MS``) is no longer live and holds nothing back; it is live
    again once it reports. The window is ``[lowest, highest]`` of the live writers' times, so
    the lower bound never passes a live writer's time; the stream cut is the upper bound of
    their positions and of the previous watermark's cut. A watermark is added only when its
    lower bound is later than the previous one's: both bounds and the cut only move forward.

    Queries: a fixed handful for all of ``streams`` together (marks, previous watermarks,
    current epochs, one insert, one clean-up), plus two for a stream whose writers reported
    positions in segments the stream has moved past (a scale since).
    """
    by_id = {s.pk: s for s in streams}
    horizons = {s.pk: _live_since(s) for s in streams}
    rows = list(
        WriterMark.objects.filter(stream_id__in=by_id, is_alive=True).values_list(
            "pk", "stream_id", "timestamp", "position", "updated_at"
        )
    )
    live: dict[int, list[tuple[int, dict[str, int]]]] = {}
    stale: list[int] = []
    for pk, stream_id, timestamp, position, updated_at in rows:
        if updated_at < horizons[stream_id]:
            stale.append(pk)
        else:
            live.setdefault(stream_id, []).append((timestamp, position))
    if stale:  # (a writer that reported since this read is left alone: updated_at is newer)
        newest = max(horizons.values())
        WriterMark.objects.filter(pk__in=stale, updated_at__lt=newest).update(is_alive=False)
    if not live:
        return []
    latest = Watermark.objects.filter(stream=OuterRef("stream")).order_by("-number")
    previous = {
        w.stream_id: w
        for w in Watermark.objects.filter(
            stream_id__in=live, number=Subquery(latest.values("number")[:1])
        )
    }
    epochs = {
        e.stream_id: e.segment_list()
        for e in Epoch.objects.filter(stream_id__in=live, epoch=F("stream__current_epoch"))
    }
    made: list[Watermark] = []
    for stream_id, reports in live.items():
        last = previous.get(stream_id)
        low = min(timestamp for timestamp, _ in reports)
        high = max(timestamp for timestamp, _ in reports)
        if last is not None:
            if low <= last.low_time:
                continue
            high = max(high, last.high_time)
        cuts = [decode_stream_cut(position) for _, position in reports]
        if last is not None:
            cuts.append(decode_stream_cut(last.stream_cut))
        bound = _upper_bound(by_id[stream_id], cuts, epochs.get(stream_id, ()))
        if bound is None:
            continue
        made.append(
            Watermark(
                stream_id=stream_id,
                number=last.number + 1 if last is not None else 1,
                low_time=low,
                high_time=high,
                stream_cut=encode_stream_cut({s.id: o for s, o in bound.items()}),
            )
        )
    # (a number another round made meanwhile is skipped: that round's watermark stands)
    Watermark.objects.bulk_create(made, ignore_conflicts=True)
    old = [
        Q(stream_id=w.stream_id, number__lte=w.number - WATERMARKS_KEPT)
        for w in made
        if w.number > WATERMARKS_KEPT
    ]
    if old:
        Watermark.objects.filter(functools.reduce(operator.or_, old)).delete()
    return made


def latest_watermark(scope: str, name: str) -> Watermark:
    """The stream's newest watermark, or ``NoWatermarkError`` while it has none."""
    stream = get_stream(scope, name)
    watermark = Watermark.objects.filter(stream=stream).order_by("-number").first()
    if watermark is None:
        raise NoWatermarkError(f"stream {scope}/{name} has no watermark yet")
    return watermark
