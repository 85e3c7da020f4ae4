"""Writer marks (each writer's last reported time and position) and the watermarks made of them.

One ``WriterMark`` row per (stream, writer), overwritten at each report. The watermark job
reads a stream's marks, and appends a ``Watermark`` (numbered per stream, so the latest is one
index lookup) holding the stream cut at or after every writer's position and the [low, high]
range of their times.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import F, Q

from controller_app.models.stream import Stream


class WriterMark(models.Model):
    """The last time and position a writer reported on a stream."""

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="writer_marks", db_index=False
    )
    writer_id = models.CharField(max_length=64)
    timestamp = models.BigIntegerField(help_text="The writer's time, ms.")
    position = models.JSONField(default=dict, blank=True, help_text='{"<segment id>": offset, ...}')
    is_alive = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["stream", "writer_id"], name="writer_mark_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.writer_id}@{self.timestamp}"


class Watermark(models.Model):
    """A stream cut with the time bounds of the writer marks it was computed from."""

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="watermarks", db_index=False
    )
    number = models.BigIntegerField(help_text="1, 2, ... per stream.")
    low_time = models.BigIntegerField(help_text="ms")
    high_time = models.BigIntegerField(help_text="ms")
    stream_cut = models.JSONField(help_text='{"<segment id>": offset, ...}')
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["stream", "number"], name="watermark_unique"),
            models.CheckConstraint(
                condition=Q(low_time__lte=F("high_time")), name="watermark_time_bounds"
            ),
        ]

    def __str__(self) -> str:
        return f"watermark {self.number} [{self.low_time}, {self.high_time}]"

    def as_json(self) -> dict[str, Any]:
        """As REST and the WebSocket tail read show it."""
        return {
            "number": self.number,
            "lowerTimeBound": self.low_time,
            "upperTimeBound": self.high_time,
            "streamCut": dict(self.stream_cut),
        }
