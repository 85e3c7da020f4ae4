"""Controller metadata: one module per aggregate, one row per record (see
docs/components/controller-metadata.md for the records, their indexes and each query's cost).

``transition()`` is the one way to change a record's state (compare-and-swap on ``version``).

Its modules:

* ``audit``: the audit log
* ``base``: the compare-and-swap state helper shared by every record that has a lifecycle
* ``credentials``: the generation of the credentials, bumped by every change to them
* ``epoch``: a stream's history
* ``grants``: permissions on resource strings, for users and groups (and their denials)
* ``host``: the host store
* ``kafka``: Kafka consumer groups' committed offsets and lag, the producer ids handed out
* ``kvt``: key-value table
* ``quotas``: quotas per scope, and what each node measured of the scopes it serves
* ``reader_group``: reader groups as the controller knows them, and their subscriptions to
  streams
* ``registry``: the schema registry (schemas, subjects' versions, settings)
* ``retention``: the head of a stream and its retention set
* ``scope``: scope
* ``stream``: stream aggregate root
* ``transaction``: stream transactions
* ``watermark``: writer marks (each writer's last reported time and position) and the watermarks
  made of them
"""

from controller_app.models.audit import AuditEntry
from controller_app.models.base import StatefulModel, transition
from controller_app.models.credentials import CredentialsGeneration
from controller_app.models.epoch import Epoch, EpochTransition, SegmentRecord
from controller_app.models.grants import Grant
from controller_app.models.host import (
    CanaryProbe,
    ClusterLease,
    Container,
    ContainerAssignment,
    ContainerMove,
    Node,
    ProcessHeartbeat,
    TaskCount,
)
from controller_app.models.kafka import (
    KafkaCommittedOffset,
    KafkaGroupLag,
    KafkaNodeReport,
    KafkaProducerId,
)
from controller_app.models.kvt import KeyValueTable
from controller_app.models.quotas import QuotaUsage, ScopeQuota
from controller_app.models.reader_group import ReaderGroup, ReaderGroupLag, Subscriber
from controller_app.models.registry import RegistrySchema, RegistrySetting, SubjectVersion
from controller_app.models.retention import StreamCutRecord, TruncationRecord
from controller_app.models.scope import Scope
from controller_app.models.stream import BucketLease, Stream, StreamBucket, StreamTag
from controller_app.models.transaction import CompletedTransaction, Transaction
from controller_app.models.watermark import Watermark, WriterMark

__all__ = [
    "AuditEntry",
    "BucketLease",
    "CanaryProbe",
    "ClusterLease",
    "CompletedTransaction",
    "Container",
    "ContainerAssignment",
    "ContainerMove",
    "CredentialsGeneration",
    "Epoch",
    "EpochTransition",
    "Grant",
    "KafkaCommittedOffset",
    "KafkaGroupLag",
    "KafkaNodeReport",
    "KafkaProducerId",
    "KeyValueTable",
    "Node",
    "ProcessHeartbeat",
    "QuotaUsage",
    "ReaderGroup",
    "ReaderGroupLag",
    "RegistrySchema",
    "RegistrySetting",
    "Scope",
    "ScopeQuota",
    "SegmentRecord",
    "StatefulModel",
    "Stream",
    "StreamBucket",
    "StreamCutRecord",
    "StreamTag",
    "SubjectVersion",
    "Subscriber",
    "TaskCount",
    "Transaction",
    "TruncationRecord",
    "Watermark",
    "WriterMark",
    "transition",
]
