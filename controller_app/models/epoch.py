"""A stream's history: one row per epoch, one row per segment, one row per scale in progress.

Laid out as PDP-32 lays out Pravega's tables, one record per row:

* ``Epoch`` carries its whole segment list as JSON (``[number, creation epoch, key start,
  key end, creation time]``, by key range), so "the segments of epoch e" is one row; its
  ``creation_time`` is the time index (``(stream, creation_time, epoch)``).
* ``SegmentRecord`` is a segment's own row, keyed by ``(stream, creation_epoch, number)``
  (that is, by segment id): key range, creation time and what is known once it is sealed, its
  sealing epoch (for successors) and its size at sealing (for retention). PDP-32 shards the
  sealed sizes by segment number to read many at once; here the rows of the segments created
  in a range of epochs are one index range.
* ``EpochTransition`` is a scale in progress (Pravega's EpochTransitionRecord).
"""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from controller_app.choices import (
    EPOCH_TRANSITION_PENDING,
    EPOCH_TRANSITION_TRANSITIONS,
    EpochTransitionState,
)
from controller_app.models.base import StatefulModel
from controller_app.models.stream import Stream
from controller_app.segments import Segment, decode_segments
from millrace.kernel.naming import segment_id, short_segment_name


class Epoch(models.Model):
    """One generation of a stream's segment set, covering [0, 1) exactly."""

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="epochs", db_index=False
    )
    epoch = models.IntegerField()
    reference_epoch = models.IntegerField(
        help_text="The epoch it duplicates (rolling transactions), else itself."
    )
    creation_time = models.BigIntegerField(help_text="ms since the Unix epoch")
    segments = models.JSONField(
        help_text="[[number, creation epoch, key start, key end, creation time]]"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["stream", "epoch"], name="epoch_unique"),
            models.CheckConstraint(
                condition=Q(epoch__gte=0, reference_epoch__gte=0, reference_epoch__lte=F("epoch")),
                name="epoch_reference_not_after",
            ),
        ]
        indexes = [
            models.Index(fields=["stream", "creation_time", "epoch"], name="epoch_time_index"),
        ]

    def __str__(self) -> str:
        return f"epoch {self.epoch}"

    def segment_list(self) -> tuple[Segment, ...]:
        """The epoch's segments, by key range."""
        return decode_segments(self.segments)


class SegmentRecord(models.Model):
    """One segment: created in an epoch, sealed (maybe) in a later one with a final size."""

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="segments", db_index=False
    )
    number = models.IntegerField()
    creation_epoch = models.IntegerField()
    key_start = models.FloatField()
    key_end = models.FloatField()
    creation_time = models.BigIntegerField(help_text="ms since the Unix epoch")
    sealing_epoch = models.IntegerField(
        null=True, blank=True, help_text="The first epoch without this segment."
    )
    sealed_size = models.BigIntegerField(
        null=True, blank=True, help_text="Length in bytes when sealed."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["stream", "creation_epoch", "number"], name="segment_record_unique"
            ),
            models.CheckConstraint(
                condition=Q(number__gte=0, creation_epoch__gte=0), name="segment_ids_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(key_start__gte=0.0, key_end__lte=1.0, key_start__lt=F("key_end")),
                name="segment_key_range",
            ),
            models.CheckConstraint(
                condition=Q(sealing_epoch__isnull=True) | Q(sealing_epoch__gt=F("creation_epoch")),
                name="segment_sealed_after_created",
            ),
            models.CheckConstraint(
                condition=Q(sealed_size__isnull=True) | Q(sealed_size__gte=0),
                name="segment_sealed_size_gte_0",
            ),
        ]

    def __str__(self) -> str:
        return short_segment_name(self.number, self.creation_epoch)

    @property
    def segment_id(self) -> int:
        """``(creation_epoch << 32) | number``."""
        return segment_id(self.creation_epoch, self.number)

    def as_segment(self) -> Segment:
        return Segment(
            self.number, self.creation_epoch, self.key_start, self.key_end, self.creation_time
        )


class EpochTransition(StatefulModel):
    """A scale of ``active_epoch`` into ``new_epoch``: the segments it seals, the new ranges."""

    TRANSITIONS = EPOCH_TRANSITION_TRANSITIONS

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="epoch_transitions", db_index=False
    )
    state = models.CharField(
        max_length=16,
        choices=EpochTransitionState.choices,
        default=EpochTransitionState.REQUESTED,
    )
    active_epoch = models.IntegerField()
    new_epoch = models.IntegerField()
    segments_to_seal = models.JSONField(help_text="Ids of the segments the scale seals.")
    new_ranges = models.JSONField(help_text="[[key start, key end], ...] of the new segments.")
    scale_time = models.BigIntegerField(help_text="ms since the Unix epoch")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["stream"],
                condition=Q(state__in=sorted(EPOCH_TRANSITION_PENDING)),
                name="epoch_transition_one_pending",
            ),
            models.CheckConstraint(
                condition=Q(new_epoch__gt=F("active_epoch")), name="epoch_transition_forward"
            ),
        ]
        indexes = [
            models.Index(fields=["stream", "new_epoch"], name="epoch_transition_new_epoch"),
        ]

    def __str__(self) -> str:
        return f"scale {self.active_epoch} → {self.new_epoch}"
