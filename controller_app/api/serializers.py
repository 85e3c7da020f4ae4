"""JSON shapes of the REST API, with Pravega's field names and unit conversions.

Pravega's ``RetentionConfig`` speaks days and megabytes (``LIMITED_DAYS``, ``LIMITED_SIZE_MB``,
with ``timeBasedRetention`` {days, hours, minutes} for finer times); Millrace stores
milliseconds and bytes. ``retention_to_config`` and ``retention_from_stream`` convert, as
Pravega's ``ModelHelper`` does.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controller_app.api import fields
from controller_app.choices import RetentionPolicyType, ScalingPolicyType
from controller_app.models import Stream
from controller_app.models.stream import RETENTION_MAX_DEFAULT
from controller_app.workflows.config import TAG_LENGTH_MAX, StreamConfig
from millrace.kernel import defaults
from millrace.kernel.schema_policy import MODES

MIB = 1024 * 1024
MINUTE_MS, HOUR_MS, DAY_MS = 60_000, 3_600_000, 86_400_000
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


class ScopeCreateSerializer(serializers.Serializer[Any]):
    scopeName = fields.CharField(max_length=250)


class ScopeSerializer(serializers.Serializer[Any]):
    scopeName = fields.CharField()


class ScopesListSerializer(serializers.Serializer[Any]):
    scopes = ScopeSerializer(many=True)


class ScalingConfigSerializer(serializers.Serializer[Any]):
    type = serializers.ChoiceField(choices=ScalingPolicyType.values)
    targetRate = serializers.IntegerField(min_value=0, max_value=INT32_MAX, required=False)
    scaleFactor = serializers.IntegerField(min_value=0, max_value=INT32_MAX, required=False)
    minSegments = serializers.IntegerField(min_value=1, max_value=INT32_MAX, required=False)


class TimeBasedRetentionSerializer(serializers.Serializer[Any]):
    days = serializers.IntegerField(min_value=0, max_value=10**8, required=False, default=0)
    hours = serializers.IntegerField(min_value=0, max_value=10**9, required=False, default=0)
    minutes = serializers.IntegerField(min_value=0, max_value=10**10, required=False, default=0)


class RetentionConfigSerializer(serializers.Serializer[Any]):
    type = serializers.ChoiceField(choices=["LIMITED_DAYS", "LIMITED_SIZE_MB"])
    value = serializers.IntegerField(min_value=0, max_value=10**12, required=False, default=0)
    timeBasedRetention = TimeBasedRetentionSerializer(required=False, allow_null=True)
    maxValue = serializers.IntegerField(min_value=0, max_value=10**12, required=False, default=0)
    maxTimeBasedRetention = TimeBasedRetentionSerializer(required=False, allow_null=True)


class StreamUpdateSerializer(serializers.Serializer[Any]):
    scalingPolicy = ScalingConfigSerializer(required=False)
    retentionPolicy = RetentionConfigSerializer(required=False, allow_null=True)
    streamTags = serializers.ListField(
        child=fields.CharField(max_length=TAG_LENGTH_MAX), required=False, max_length=128
    )
    timestampAggregationTimeout = serializers.IntegerField(
        min_value=0, max_value=INT64_MAX, required=False
    )
    rolloverSizeBytes = serializers.IntegerField(min_value=0, max_value=INT64_MAX, required=False)

    def to_config(self) -> StreamConfig:
        data: dict[str, Any] = self.validated_data
        scaling = data.get("scalingPolicy") or {}
        fields: dict[str, Any] = {
            "scaling_type": scaling.get("type", ScalingPolicyType.FIXED_NUM_SEGMENTS),
            "min_segments": scaling.get("minSegments", 1),
            "tags": tuple(data.get("streamTags") or ()),
            "timestamp_aggregation_timeout": data.get("timestampAggregationTimeout", 0),
            "rollover_size_bytes": data.get("rolloverSizeBytes", 0),
        }
        if fields["scaling_type"] != ScalingPolicyType.FIXED_NUM_SEGMENTS:
            fields["target_rate"] = scaling.get("targetRate", 0)
            fields["scale_factor"] = scaling.get("scaleFactor", 0)
        fields.update(retention_to_config(data.get("retentionPolicy")))
        return StreamConfig(**fields)


class StreamSchemaSerializer(serializers.Serializer[Any]):
    """A stream's schema binding: its value subject ('': the default) and enforcement."""

    subject = fields.CharField(max_length=255, required=False, allow_blank=True)
    enforcement = serializers.ChoiceField(choices=MODES, required=False)
    defaultSubject = serializers.BooleanField(read_only=True)


class StreamCreateSerializer(StreamUpdateSerializer):
    streamName = fields.CharField(max_length=250)
    #: (Millrace's own: the value subject and enforcement, ``/schema`` later.)
    schema = StreamSchemaSerializer(required=False)


def _duration_ms(value: dict[str, int] | None) -> int:
    if not value:
        return 0
    return (
        value.get("days", 0) * DAY_MS + value.get("hours", 0) * HOUR_MS
        + value.get("minutes", 0) * MINUTE_MS
    )  # fmt: skip


def retention_to_config(policy: dict[str, Any] | None) -> dict[str, Any]:
    """Pravega's RetentionConfig as ``StreamConfig`` retention fields (ms or bytes)."""
    if not policy:
        return {"retention_type": RetentionPolicyType.NONE}
    if policy["type"] == "LIMITED_SIZE_MB":
        value = policy.get("value", 0) * MIB
        maximum = policy.get("maxValue", 0) * MIB or RETENTION_MAX_DEFAULT
        return {"retention_type": RetentionPolicyType.SIZE, "retention_value": value,
                "retention_max": maximum}  # fmt: skip
    value = policy.get("value", 0)
    ms = value * DAY_MS if value else _duration_ms(policy.get("timeBasedRetention"))
    max_value = policy.get("maxValue", 0)
    max_ms = max_value * DAY_MS if max_value else _duration_ms(policy.get("maxTimeBasedRetention"))
    return {"retention_type": RetentionPolicyType.TIME, "retention_value": ms,
            "retention_max": max_ms or RETENTION_MAX_DEFAULT}  # fmt: skip


def _time_out(ms: int) -> tuple[int, dict[str, int]]:
    if ms % DAY_MS == 0:
        return ms // DAY_MS, {"days": ms // DAY_MS, "hours": 0, "minutes": 0}
    days, rest = divmod(ms, DAY_MS)
    return 0, {"days": days, "hours": rest // HOUR_MS, "minutes": (rest % HOUR_MS) // MINUTE_MS}


def retention_from_stream(stream: Stream) -> dict[str, Any] | None:
    if stream.retention_type == RetentionPolicyType.NONE:
        return None
    unbounded = stream.retention_max >= RETENTION_MAX_DEFAULT
    if stream.retention_type == RetentionPolicyType.SIZE:
        return {"type": "LIMITED_SIZE_MB", "value": stream.retention_value // MIB,
                "maxValue": 0 if unbounded else stream.retention_max // MIB}  # fmt: skip
    value, time_based = _time_out(stream.retention_value)
    out: dict[str, Any] = {"type": "LIMITED_DAYS", "value": value, "timeBasedRetention": time_based}
    if unbounded:
        out["maxValue"] = 0
    else:
        out["maxValue"], out["maxTimeBasedRetention"] = _time_out(stream.retention_max)
    return out


def scaling_from_stream(stream: Stream) -> dict[str, Any]:
    if stream.scaling_type == ScalingPolicyType.FIXED_NUM_SEGMENTS:
        return {"type": stream.scaling_type, "minSegments": stream.min_segments}
    return {"type": stream.scaling_type, "targetRate": stream.target_rate,
            "scaleFactor": stream.scale_factor, "minSegments": stream.min_segments}  # fmt: skip


class StreamPropertySerializer(serializers.Serializer[Any]):
    scopeName = fields.CharField()
    streamName = fields.CharField()
    scalingPolicy = ScalingConfigSerializer()
    retentionPolicy = RetentionConfigSerializer(allow_null=True)
    tags = serializers.ListField(child=fields.CharField())
    timestampAggregationTimeout = serializers.IntegerField()
    rolloverSizeBytes = serializers.IntegerField()

    @staticmethod
    def of(stream: Stream, tags: list[str]) -> dict[str, Any]:
        return {
            "scopeName": stream.scope.name,
            "streamName": stream.name,
            "scalingPolicy": scaling_from_stream(stream),
            "retentionPolicy": retention_from_stream(stream),
            "tags": tags,
            "timestampAggregationTimeout": stream.timestamp_aggregation_timeout,
            "rolloverSizeBytes": stream.rollover_size_bytes,
        }


class StreamsListSerializer(serializers.Serializer[Any]):
    streams = StreamPropertySerializer(many=True)


class StreamStateSerializer(serializers.Serializer[Any]):
    streamState = serializers.ChoiceField(choices=["SEALED"])


class SegmentSerializer(serializers.Serializer[Any]):
    """Pravega's ``Segment`` of a scaling event."""

    number = serializers.IntegerField()
    startTime = serializers.IntegerField()
    keyStart = serializers.FloatField()
    keyEnd = serializers.FloatField()


class ScaleMetadataSerializer(serializers.Serializer[Any]):
    timestamp = serializers.IntegerField()
    segmentList = SegmentSerializer(many=True)
    splits = serializers.IntegerField()
    merges = serializers.IntegerField()


class ScalingEventListSerializer(serializers.Serializer[Any]):
    scalingEvents = ScaleMetadataSerializer(many=True)


class ReaderGroupNameSerializer(serializers.Serializer[Any]):
    readerGroupName = fields.CharField()


class ReaderGroupsListSerializer(serializers.Serializer[Any]):
    readerGroups = ReaderGroupNameSerializer(many=True)


# -- Millrace's additions ---------------------------------------------------------------------


class StreamInfoSerializer(StreamPropertySerializer):
    state = fields.CharField()
    currentEpoch = serializers.IntegerField()


class SegmentInfoSerializer(serializers.Serializer[Any]):
    segmentId = serializers.IntegerField(help_text="64 bits: creation epoch << 32 | number")
    number = serializers.IntegerField()
    epoch = serializers.IntegerField(help_text="The creation epoch.")
    name = fields.CharField(help_text="Qualified segment name.")
    keyStart = serializers.FloatField()
    keyEnd = serializers.FloatField()
    offset = serializers.IntegerField(required=False, help_text="Start offset, in a position.")


class SegmentsSerializer(serializers.Serializer[Any]):
    segments = SegmentInfoSerializer(many=True)


class SegmentDetailSerializer(SegmentInfoSerializer):
    exists = serializers.BooleanField(help_text="False once deleted (truncated away).")
    sealed = serializers.BooleanField()
    length = serializers.IntegerField(help_text="Bytes written (the tail offset).")
    startOffset = serializers.IntegerField(help_text="Lowest readable offset (truncation).")
    sealedSize = serializers.IntegerField(allow_null=True)


class SuccessorSerializer(SegmentInfoSerializer):
    predecessors = serializers.ListField(child=serializers.IntegerField())


class SuccessorsSerializer(serializers.Serializer[Any]):
    successors = SuccessorSerializer(many=True)


class SegmentUriSerializer(serializers.Serializer[Any]):
    segment = fields.CharField()
    host = fields.CharField()
    port = serializers.IntegerField()


class StreamCutField(serializers.DictField):
    """``{"<segment id>": offset}``."""

    child = serializers.IntegerField(min_value=0, max_value=INT64_MAX)

    def to_internal_value(self, data: Any) -> dict[int, int]:
        values = super().to_internal_value(data)
        try:
            cut = {int(k): int(v) for k, v in values.items()}
        except ValueError:
            raise serializers.ValidationError("keys must be segment ids (integers)") from None
        if not cut:
            raise serializers.ValidationError("a stream cut names at least one segment")
        if any(k < 0 or k > INT64_MAX for k in cut):
            raise serializers.ValidationError("segment ids are 64-bit, not negative")
        return cut


class ScaleRequestSerializer(serializers.Serializer[Any]):
    sealedSegments = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=INT64_MAX), min_length=1,
        max_length=1024,
    )  # fmt: skip
    newRanges = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(), min_length=2, max_length=2),
        min_length=1, max_length=1024,
        help_text="[[keyStart, keyEnd], ...] covering exactly the sealed segments' ranges",
    )  # fmt: skip
    scaleTime = serializers.IntegerField(min_value=0, max_value=INT64_MAX, required=False)


class ScaleResultSerializer(serializers.Serializer[Any]):
    status = fields.CharField()
    epoch = serializers.IntegerField()
    segments = SegmentInfoSerializer(many=True)


class StreamCutRequestSerializer(serializers.Serializer[Any]):
    streamCut = StreamCutField()


class CutsRequestSerializer(serializers.Serializer[Any]):
    fromStreamCut = StreamCutField(required=False)
    toStreamCut = StreamCutField(required=False)


class NextCutRequestSerializer(serializers.Serializer[Any]):
    streamCut = StreamCutField()
    approxBytes = serializers.IntegerField(
        min_value=1, max_value=INT64_MAX, help_text="About how many bytes after the cut."
    )


class NextCutSerializer(serializers.Serializer[Any]):
    streamCut = serializers.DictField(
        child=serializers.IntegerField(), help_text="The next cut: segment id -> offset."
    )
    bytes = serializers.IntegerField(help_text="Bytes between the given cut and the next.")


class SizeSerializer(serializers.Serializer[Any]):
    size = serializers.IntegerField(help_text="Bytes from the start of the stream to the cut.")


class ValiditySerializer(serializers.Serializer[Any]):
    valid = serializers.BooleanField()
    message = fields.CharField(allow_blank=True)


class TruncateResultSerializer(serializers.Serializer[Any]):
    head = SegmentInfoSerializer(many=True)


class TransactionCreateSerializer(serializers.Serializer[Any]):
    leaseMs = serializers.IntegerField(
        min_value=defaults.TRANSACTION_LEASE_MS_MIN,
        max_value=defaults.TRANSACTION_LEASE_MS_MAX,
        default=defaults.TRANSACTION_LEASE_MS,
    )
    writerId = fields.CharField(max_length=64, required=False, allow_blank=True, default="")


class OpenTransactionSerializer(serializers.Serializer[Any]):
    txnId = fields.CharField()
    state = fields.CharField()
    writerId = fields.CharField()


class OpenTransactionsSerializer(serializers.Serializer[Any]):
    transactions = OpenTransactionSerializer(many=True)


class ShadowSegmentSerializer(serializers.Serializer[Any]):
    name = fields.CharField(help_text="The transaction segment to write to.")
    parentId = serializers.IntegerField()
    keyStart = serializers.FloatField()
    keyEnd = serializers.FloatField()


#: Transactions one request commits at most (``CommitManySerializer``).
COMMIT_AT_ONCE_MAX = 1000


class TransactionSerializer(serializers.Serializer[Any]):
    txnId = serializers.UUIDField()
    state = fields.CharField()
    epoch = serializers.IntegerField(required=False)
    segments = serializers.ListField(child=fields.CharField(), required=False)
    shadowSegments = ShadowSegmentSerializer(many=True, required=False)


class PingSerializer(serializers.Serializer[Any]):
    leaseMs = serializers.IntegerField(
        min_value=defaults.TRANSACTION_LEASE_MS_MIN, max_value=defaults.TRANSACTION_LEASE_MS_MAX
    )


class CommitSerializer(serializers.Serializer[Any]):
    writerId = fields.CharField(max_length=64, required=False, allow_blank=True, default="")
    timestamp = serializers.IntegerField(min_value=0, max_value=INT64_MAX, required=False)
    wait = serializers.FloatField(min_value=0, max_value=60, required=False)


class CommitManySerializer(serializers.Serializer[Any]):
    txnIds = serializers.ListField(
        child=serializers.UUIDField(), min_length=1, max_length=COMMIT_AT_ONCE_MAX
    )
    timestamp = serializers.IntegerField(min_value=0, max_value=INT64_MAX, required=False)
    wait = serializers.FloatField(min_value=0, max_value=60, required=False)


class TransactionsStateSerializer(serializers.Serializer[Any]):
    transactions = TransactionSerializer(many=True)


class AbortSerializer(serializers.Serializer[Any]):
    wait = serializers.FloatField(min_value=0, max_value=60, required=False)


class WriterMarkSerializer(serializers.Serializer[Any]):
    writerId = fields.CharField(max_length=64)
    timestamp = serializers.IntegerField(min_value=0, max_value=INT64_MAX)
    position = StreamCutField(required=False, default=dict)

    def validate_position(self, value: Any) -> Any:
        return value


class WriterMarkResultSerializer(serializers.Serializer[Any]):
    writerId = fields.CharField()
    timestamp = serializers.IntegerField()


class WatermarkSerializer(serializers.Serializer[Any]):
    """A stream's newest watermark (Pravega's ``Watermark``): every event a live writer wrote
    at a time before ``lowerTimeBound`` lies before ``streamCut``."""

    number = serializers.IntegerField(help_text="1, 2, ... per stream; only grows.")
    lowerTimeBound = serializers.IntegerField(help_text="ms")
    upperTimeBound = serializers.IntegerField(help_text="ms")
    streamCut = serializers.DictField(child=serializers.IntegerField())


class DelegationTokenSerializer(serializers.Serializer[Any]):
    token = fields.CharField(help_text="Empty when authentication is off.")
    expiresIn = serializers.IntegerField(help_text="Seconds the token is valid.")


class SegmentRatesSerializer(serializers.Serializer[Any]):
    segmentId = serializers.IntegerField()
    name = fields.CharField()
    keyStart = serializers.FloatField()
    keyEnd = serializers.FloatField()
    eventsPerSecond = serializers.FloatField()
    bytesPerSecond = serializers.FloatField()


class StreamMetricsSerializer(serializers.Serializer[Any]):
    eventsPerSecond = serializers.FloatField()
    bytesPerSecond = serializers.FloatField(help_text="Event headers (8 bytes each) included.")
    segments = SegmentRatesSerializer(many=True)
