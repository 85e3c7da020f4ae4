"""The head of a stream and its retention set: truncation records and stream-cut records.

* ``TruncationRecord``: one row per truncation; the one with the highest ``number`` is the
  head of the stream. It keeps the cut (segment id → offset), the cut's segments (so the head
  is one row), the span of epochs the cut lies in, and the ids of the segments that this
  truncation deleted.
* ``StreamCutRecord``: one row per stream cut that retention collected (PDP-32's retention
  set plus its individual records): recording time, the stream's size up to the cut, the cut.
  ``span_high_epoch`` (the latest creation epoch among its segments) finds the newest record
  at or before another cut with one index lookup.
"""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from controller_app.models.stream import Stream
from controller_app.segments import Segment, decode_segments, decode_stream_cut


class TruncationRecord(models.Model):
    """A truncation of ``stream`` at ``stream_cut``; the latest one is the stream's head."""

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="truncations", db_index=False
    )
    number = models.IntegerField(help_text="1, 2, ... per stream; the highest is current.")
    stream_cut = models.JSONField(help_text='{"<segment id>": offset, ...}')
    segments = models.JSONField(help_text="The cut's segments, encoded as in Epoch.segments.")
    span_low_epoch = models.IntegerField()
    span_high_epoch = models.IntegerField()
    deleted_segments = models.JSONField(
        default=list, blank=True, help_text="Ids of the segments this truncation deleted."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["stream", "number"], name="truncation_unique"),
            models.CheckConstraint(
                condition=Q(span_low_epoch__gte=0, span_low_epoch__lte=F("span_high_epoch")),
                name="truncation_span",
            ),
        ]

    def __str__(self) -> str:
        return f"truncation {self.number}"

    def cut(self) -> dict[Segment, int]:
        """The head: each segment of the cut with its offset."""
        offsets = decode_stream_cut(self.stream_cut)
        return {seg: offsets[seg.id] for seg in decode_segments(self.segments)}


class StreamCutRecord(models.Model):
    """A stream cut in the retention set, with the size of the stream up to it."""

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="stream_cuts", db_index=False
    )
    recording_time = models.BigIntegerField(help_text="ms since the Unix epoch")
    recording_size = models.BigIntegerField(help_text="Bytes from the stream's start to the cut.")
    stream_cut = models.JSONField(help_text='{"<segment id>": offset, ...}')
    span_high_epoch = models.IntegerField(help_text="Latest creation epoch of its segments.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["stream", "recording_time"], name="stream_cut_record_unique"
            ),
            models.CheckConstraint(
                condition=Q(recording_size__gte=0, span_high_epoch__gte=0),
                name="stream_cut_record_not_negative",
            ),
        ]
        indexes = [
            models.Index(fields=["stream", "recording_size"], name="stream_cut_record_size"),
            models.Index(
                fields=["stream", "span_high_epoch", "recording_time"],
                name="stream_cut_record_span",
            ),
        ]

    def __str__(self) -> str:
        return f"stream cut at {self.recording_time}"

    def cut_ids(self) -> dict[int, int]:
        return decode_stream_cut(self.stream_cut)
