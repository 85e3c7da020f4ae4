"""Stream aggregate root: configuration, lifecycle state, current epoch; tags; buckets.

The configuration columns follow Pravega's ``StreamConfiguration`` (scaling policy, retention
policy, timestamp aggregation timeout, rollover size); the value subject and schema
enforcement are Millrace's own (``controller_app.registry.policies``). Tags live one per row in
``StreamTag`` so that "streams of a scope with tag T" is an index range. ``current_epoch``
points at the tail epoch (during a scale the newest epoch may not be current yet).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from controller_app.choices import (
    STREAM_TRANSITIONS,
    BucketService,
    RetentionPolicyType,
    ScalingPolicyType,
    SchemaEnforcement,
    StreamState,
)
from controller_app.models.base import StatefulModel
from controller_app.models.scope import Scope
from millrace.kernel.schema_policy import default_subject

#: Pravega's default ``retentionMax`` (no upper bound).
RETENTION_MAX_DEFAULT = 2**63 - 1


class Stream(StatefulModel):
    """A stream: configuration, state (compare-and-swap on ``version``), tail epoch."""

    TRANSITIONS = STREAM_TRANSITIONS

    scope = models.ForeignKey(
        Scope, on_delete=models.PROTECT, related_name="streams", db_index=False
    )
    name = models.CharField(max_length=250)
    state = models.CharField(
        max_length=16, choices=StreamState.choices, default=StreamState.CREATING
    )
    current_epoch = models.IntegerField(default=0, help_text="The tail epoch.")

    scaling_type = models.CharField(
        max_length=32,
        choices=ScalingPolicyType.choices,
        default=ScalingPolicyType.FIXED_NUM_SEGMENTS,
    )
    target_rate = models.IntegerField(default=0, help_text="KiB/s or events/s per segment.")
    scale_factor = models.IntegerField(default=0, help_text="Segments one split creates, at most.")
    min_segments = models.IntegerField(default=1)

    retention_type = models.CharField(
        max_length=8, choices=RetentionPolicyType.choices, default=RetentionPolicyType.NONE
    )
    retention_value = models.BigIntegerField(default=0, help_text="ms (TIME) or bytes (SIZE).")
    retention_max = models.BigIntegerField(default=RETENTION_MAX_DEFAULT)

    timestamp_aggregation_timeout = models.BigIntegerField(default=0, help_text="ms")
    rollover_size_bytes = models.BigIntegerField(default=0)

    #: The schema registry subject its events' values are written with ('': the default,
    #: ``<scope>.<stream>-value``), and how its appends are held to it.
    value_subject = models.CharField(max_length=255, blank=True, default="")
    schema_enforcement = models.CharField(
        max_length=8, choices=SchemaEnforcement.choices, default=SchemaEnforcement.NONE
    )

    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["scope_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "name"], name="stream_unique_name"),
            models.CheckConstraint(condition=Q(min_segments__gte=1), name="stream_min_segments"),
            models.CheckConstraint(condition=Q(current_epoch__gte=0), name="stream_epoch_gte_0"),
            models.CheckConstraint(
                condition=Q(
                    target_rate__gte=0,
                    scale_factor__gte=0,
                    retention_value__gte=0,
                    retention_max__gte=0,
                    timestamp_aggregation_timeout__gte=0,
                    rollover_size_bytes__gte=0,
                ),
                name="stream_config_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return self.scoped_name if self.scope_id else self.name

    @property
    def scoped_name(self) -> str:
        return f"{self.scope.name}/{self.name}"

    @property
    def subject(self) -> str:
        """The value subject it names, or the default one."""
        return self.value_subject or default_subject(self.scope.name, self.name)


class StreamTag(models.Model):
    """One tag of one stream; ``scope`` repeats the stream's so a tag query is one range."""

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+", db_index=False)
    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="tags", db_index=False
    )
    tag = models.CharField(max_length=256)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["stream", "tag"], name="stream_tag_unique"),
        ]
        indexes = [models.Index(fields=["scope", "tag", "stream"], name="stream_tag_lookup")]

    def __str__(self) -> str:
        return self.tag


class StreamBucket(models.Model):
    """A stream's bucket for one periodic service (stable hash of ``scope/stream``)."""

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="buckets", db_index=False
    )
    service = models.CharField(max_length=16, choices=BucketService.choices)
    bucket = models.IntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["stream", "service"], name="stream_bucket_unique"),
            models.CheckConstraint(condition=Q(bucket__gte=0), name="stream_bucket_gte_0"),
        ]
        indexes = [models.Index(fields=["service", "bucket"], name="stream_bucket_lookup")]

    def __str__(self) -> str:
        return f"{self.service} bucket {self.bucket}"


class BucketLease(models.Model):
    """Who runs one periodic service's round over one bucket, until when: a round starts only
    on a lease that is free or expired, so no stream is visited by two rounds at once, and a
    worker killed mid-round holds its bucket no longer than the lease."""

    service = models.CharField(max_length=16, choices=BucketService.choices)
    bucket = models.IntegerField()
    holder = models.CharField(max_length=64, blank=True, default="")
    expires_ms = models.BigIntegerField(default=0, help_text="ms since the Unix epoch")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["service", "bucket"], name="bucket_lease_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.service} bucket {self.bucket} held by {self.holder or 'nobody'}"
