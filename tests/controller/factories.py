"""factory_boy factories for every controller model (valid rows with the fewest choices)."""

from __future__ import annotations

import datetime as dt
import uuid

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone
from factory.django import DjangoModelFactory

from controller_app import models
from controller_app.choices import (
    BucketService,
    EpochTransitionState,
    KvtState,
    ReaderGroupState,
    StreamState,
    TxnState,
)
from controller_app.segments import Segment, bucket_for, encode_segments, uniform_ranges

WHOLE = Segment(0, 0, 0.0, 1.0, 0)


class ScopeFactory(DjangoModelFactory):
    class Meta:
        model = models.Scope

    name = factory.Sequence(lambda n: f"scope-{n}")


class StreamFactory(DjangoModelFactory):
    class Meta:
        model = models.Stream

    scope = factory.SubFactory(ScopeFactory)
    name = factory.Sequence(lambda n: f"stream-{n}")
    state = StreamState.ACTIVE


class StreamTagFactory(DjangoModelFactory):
    class Meta:
        model = models.StreamTag

    stream = factory.SubFactory(StreamFactory)
    scope = factory.SelfAttribute("stream.scope")
    tag = factory.Sequence(lambda n: f"tag-{n}")


class StreamBucketFactory(DjangoModelFactory):
    class Meta:
        model = models.StreamBucket

    stream = factory.SubFactory(StreamFactory)
    service = BucketService.RETENTION
    bucket = factory.LazyAttribute(lambda o: bucket_for(o.stream.scope.name, o.stream.name, 16))


class EpochFactory(DjangoModelFactory):
    """Epoch ``epoch`` of a stream, with ``segment_count`` segments created in it."""

    class Meta:
        model = models.Epoch

    class Params:
        segment_count = 1

    stream = factory.SubFactory(StreamFactory)
    epoch = 0
    reference_epoch = factory.SelfAttribute("epoch")
    creation_time = factory.LazyAttribute(lambda o: 1_000_000 + 1000 * o.epoch)
    segments = factory.LazyAttribute(
        lambda o: encode_segments(
            Segment(i, o.epoch, start, end, o.creation_time)
            for i, (start, end) in enumerate(uniform_ranges(o.segment_count))
        )
    )


class SegmentRecordFactory(DjangoModelFactory):
    class Meta:
        model = models.SegmentRecord

    stream = factory.SubFactory(StreamFactory)
    number = factory.Sequence(lambda n: n)
    creation_epoch = 0
    key_start = 0.0
    key_end = 1.0
    creation_time = 1_000_000


class EpochTransitionFactory(DjangoModelFactory):
    class Meta:
        model = models.EpochTransition

    stream = factory.SubFactory(StreamFactory)
    state = EpochTransitionState.REQUESTED
    active_epoch = 0
    new_epoch = 1
    segments_to_seal = factory.LazyFunction(lambda: [WHOLE.id])
    new_ranges = factory.LazyFunction(lambda: [list(r) for r in uniform_ranges(2)])
    scale_time = 2_000_000


class TruncationRecordFactory(DjangoModelFactory):
    class Meta:
        model = models.TruncationRecord

    stream = factory.SubFactory(StreamFactory)
    number = factory.Sequence(lambda n: n + 1)
    stream_cut = factory.LazyFunction(lambda: {str(WHOLE.id): 0})
    segments = factory.LazyFunction(lambda: encode_segments([WHOLE]))
    span_low_epoch = 0
    span_high_epoch = 0


class StreamCutRecordFactory(DjangoModelFactory):
    class Meta:
        model = models.StreamCutRecord

    stream = factory.SubFactory(StreamFactory)
    recording_time = factory.Sequence(lambda n: 1_000_000 + n)
    recording_size = 0
    stream_cut = factory.LazyFunction(lambda: {str(WHOLE.id): 0})
    span_high_epoch = 0


def _later(seconds: int) -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=seconds)


class TransactionFactory(DjangoModelFactory):
    class Meta:
        model = models.Transaction

    stream = factory.SubFactory(StreamFactory)
    epoch = 0
    high_bits = factory.LazyAttribute(lambda o: o.epoch << 32)
    low_bits = factory.Sequence(lambda n: n + 1)
    state = TxnState.OPEN
    writer_id = "1"
    lease_expires_at = factory.LazyFunction(lambda: _later(90))
    max_execution_deadline = factory.LazyFunction(lambda: _later(3600))


class CompletedTransactionFactory(DjangoModelFactory):
    class Meta:
        model = models.CompletedTransaction

    stream = factory.SubFactory(StreamFactory)
    high_bits = 0
    low_bits = factory.Sequence(lambda n: n + 1)
    state = TxnState.COMMITTED
    completed_at = factory.LazyFunction(timezone.now)


class ReaderGroupFactory(DjangoModelFactory):
    class Meta:
        model = models.ReaderGroup

    scope = factory.SubFactory(ScopeFactory)
    name = factory.Sequence(lambda n: f"rg-{n}")
    state = ReaderGroupState.ACTIVE
    configuration = factory.LazyFunction(lambda: {"groupRefreshTimeMillis": 3000})


class KeyValueTableFactory(DjangoModelFactory):
    class Meta:
        model = models.KeyValueTable

    scope = factory.SubFactory(ScopeFactory)
    name = factory.Sequence(lambda n: f"kvt-{n}")
    state = KvtState.ACTIVE
    partitions = 2
    primary_key_length = 8
    secondary_key_length = 0


class SubscriberFactory(DjangoModelFactory):
    class Meta:
        model = models.Subscriber

    stream = factory.SubFactory(StreamFactory)
    reader_group = factory.SubFactory(
        ReaderGroupFactory, scope=factory.SelfAttribute("..stream.scope")
    )
    generation = 0
    stream_cut = factory.LazyFunction(lambda: {str(WHOLE.id): 0})


class WriterMarkFactory(DjangoModelFactory):
    class Meta:
        model = models.WriterMark

    stream = factory.SubFactory(StreamFactory)
    writer_id = factory.Sequence(lambda n: str(n))
    timestamp = 1_000_000
    position = factory.LazyFunction(lambda: {str(WHOLE.id): 0})


class WatermarkFactory(DjangoModelFactory):
    class Meta:
        model = models.Watermark

    stream = factory.SubFactory(StreamFactory)
    number = factory.Sequence(lambda n: n + 1)
    low_time = 1_000_000
    high_time = 1_000_500
    stream_cut = factory.LazyFunction(lambda: {str(WHOLE.id): 0})


class NodeFactory(DjangoModelFactory):
    class Meta:
        model = models.Node

    node_id = factory.Sequence(lambda n: f"node-{n}")
    host = "127.0.0.1"
    port = factory.Sequence(lambda n: 12345 + n)


class ProcessHeartbeatFactory(DjangoModelFactory):
    class Meta:
        model = models.ProcessHeartbeat

    role = "worker"
    process = factory.Sequence(lambda n: f"host:{1000 + n}")
    beat_at = factory.LazyFunction(timezone.now)
    started_at = factory.LazyFunction(timezone.now)


class ContainerFactory(DjangoModelFactory):
    class Meta:
        model = models.Container
        django_get_or_create = ("number",)

    number = factory.Sequence(lambda n: n)


class ContainerAssignmentFactory(DjangoModelFactory):
    class Meta:
        model = models.ContainerAssignment

    container = factory.SubFactory(ContainerFactory)
    node = factory.SubFactory(NodeFactory)


class TaskCountFactory(DjangoModelFactory):
    class Meta:
        model = models.TaskCount

    task = factory.Sequence(lambda n: f"millrace.task_{n}")
    outcome = "ok"


class BucketLeaseFactory(DjangoModelFactory):
    class Meta:
        model = models.BucketLease

    service = BucketService.WATERMARKING
    bucket = factory.Sequence(lambda n: n)


class AuditEntryFactory(DjangoModelFactory):
    class Meta:
        model = models.AuditEntry

    username = factory.Sequence(lambda n: f"user{n}")
    source = "rest"
    action = "stream.scale"
    object = factory.Sequence(lambda n: f"scope/stream{n}")
    result = "ok"


class ClusterLeaseFactory(DjangoModelFactory):
    class Meta:
        model = models.ClusterLease

    name = factory.Sequence(lambda n: f"lease{n}")


class ContainerMoveFactory(DjangoModelFactory):
    class Meta:
        model = models.ContainerMove

    container = factory.Sequence(lambda n: n)
    to_node = "node-1"
    epoch = factory.Sequence(lambda n: n + 1)
    reason = "new"


class RegistrySchemaFactory(DjangoModelFactory):
    class Meta:
        model = models.RegistrySchema

    schema_type = "AVRO"
    text = factory.Sequence(lambda n: f'{{"type":"record","name":"R{n}","fields":[]}}')
    fingerprint = factory.Sequence(lambda n: f"{n:064x}")


class SubjectVersionFactory(DjangoModelFactory):
    class Meta:
        model = models.SubjectVersion

    subject = factory.Sequence(lambda n: f"s{n}-value")
    version = 1
    schema = factory.SubFactory(RegistrySchemaFactory)


class RegistrySettingFactory(DjangoModelFactory):
    class Meta:
        model = models.RegistrySetting

    subject = factory.Sequence(lambda n: f"s{n}-value")
    compatibility = "FULL"


class CredentialsGenerationFactory(DjangoModelFactory):
    class Meta:
        model = models.CredentialsGeneration
        django_get_or_create = ("id",)

    id = 1
    generation = 0


class ReaderGroupLagFactory(DjangoModelFactory):
    class Meta:
        model = models.ReaderGroupLag

    group = factory.SubFactory(ReaderGroupFactory)
    status = "OK"


class CanaryProbeFactory(DjangoModelFactory):
    class Meta:
        model = models.CanaryProbe

    node = factory.Sequence(lambda n: f"node-{n}")
    probed_at = factory.LazyFunction(timezone.now)


class GrantFactory(DjangoModelFactory):
    """A READ grant on one stream, to a new user."""

    class Meta:
        model = models.Grant

    user = factory.LazyFunction(
        lambda: get_user_model().objects.create_user(f"u{uuid.uuid4().hex[:8]}", password=None)
    )
    resource = "prn::/scope:sc/stream:st"
    permission = models.Grant.Permission.READ


class ScopeQuotaFactory(DjangoModelFactory):
    class Meta:
        model = models.ScopeQuota

    scope = factory.SubFactory(ScopeFactory)
    append_bytes_per_s = 1_000_000


class QuotaUsageFactory(DjangoModelFactory):
    class Meta:
        model = models.QuotaUsage

    node = factory.Sequence(lambda n: f"node-{n}")
    scope = "sc"
    at = factory.LazyFunction(timezone.now)


class KafkaCommittedOffsetFactory(DjangoModelFactory):
    class Meta:
        model = models.KafkaCommittedOffset

    group = factory.Sequence(lambda n: f"group-{n}")
    topic = "orders"
    partition = 0
    offset = 0


class KafkaProducerIdFactory(DjangoModelFactory):
    class Meta:
        model = models.KafkaProducerId


class KafkaNodeReportFactory(DjangoModelFactory):
    class Meta:
        model = models.KafkaNodeReport

    node = factory.Sequence(lambda n: f"node-{n}")
    report = factory.LazyFunction(lambda: {"bootstrap": "127.0.0.1:9092", "groups": [],
                                           "ends": {}})  # fmt: skip


class KafkaGroupLagFactory(DjangoModelFactory):
    class Meta:
        model = models.KafkaGroupLag

    group = factory.Sequence(lambda n: f"group-{n}")


ALL_FACTORIES = [
    KafkaCommittedOffsetFactory,
    KafkaGroupLagFactory,
    KafkaProducerIdFactory,
    KafkaNodeReportFactory,
    CanaryProbeFactory,
    ScopeQuotaFactory,
    QuotaUsageFactory,
    GrantFactory,
    CredentialsGenerationFactory,
    ReaderGroupLagFactory,
    AuditEntryFactory,
    ClusterLeaseFactory,
    ContainerMoveFactory,
    ScopeFactory,
    StreamFactory,
    StreamTagFactory,
    StreamBucketFactory,
    BucketLeaseFactory,
    TaskCountFactory,
    EpochFactory,
    SegmentRecordFactory,
    EpochTransitionFactory,
    TruncationRecordFactory,
    StreamCutRecordFactory,
    TransactionFactory,
    CompletedTransactionFactory,
    ReaderGroupFactory,
    KeyValueTableFactory,
    RegistrySchemaFactory,
    SubjectVersionFactory,
    RegistrySettingFactory,
    SubscriberFactory,
    WriterMarkFactory,
    WatermarkFactory,
    NodeFactory,
    ProcessHeartbeatFactory,
    ContainerFactory,
    ContainerAssignmentFactory,
]
