"""What the Kafka listener answers to each request it serves (one coroutine per API key).

Responsibility: turn a decoded request into its reply's values, with the node's partitions
(``partitions``), its groups (``groups``) and the catalog of topics, users and committed
offsets (``KafkaCatalog``, on a thread). Values are plain mappings; ``codec.build`` makes the
reply of the version asked from them. Who the client is (``Session``) is the connection's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from millrace.kernel.kafka_topics import (
    CatalogError,
    CommittedOffset,
    KafkaCatalog,
    TopicView,
    stream_topic,
    topic_stream,
)
from segment_app.engine.errors import ContainerOfflineError, EngineError
from segment_app.kafka import codec
from segment_app.kafka.groups import GroupCoordinator, GroupError
from segment_app.kafka.partitions import (
    CorruptPartitionError,
    PartitionLog,
    Partitions,
    frame_values,
)
from segment_app.kafka.record_meta import RecordMeta
from segment_app.server.quotas import ScopeThrottles
from segment_app.server.schema_guard import UNKNOWN_SCHEMA, SchemaGuard, judge, stream_of

__all__ = ["Handlers", "KafkaSettings", "Session"]

log = logging.getLogger(__name__)

# Kafka's error codes, by name (kio's ``ErrorCode`` has them all; these are the ones used).
NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
MESSAGE_TOO_LARGE = 10
COORDINATOR_NOT_AVAILABLE = 15
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
INVALID_PARTITIONS = 37
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
GROUP_ID_NOT_FOUND = 69
INVALID_RECORD = 87

#: The mechanisms SaslHandshake offers.
MECHANISMS = ("PLAIN",)
#: How long a node keeps what the catalog said of a topic, and of a principal's access to it
#: (a grant's change reaches Kafka's clients within this).
TOPIC_CACHE_S = 2.0
#: Kafka's ``message.max.bytes``: the largest batch a produce may carry.
BATCH_BYTES_MAX = 4 * 1024 * 1024
_INT64 = struct.Struct(">q")
_BATCH_HEAD = struct.Struct(">qi")


@dataclasses.dataclass(frozen=True)
class KafkaSettings:
    """The listener's part of a node's settings."""

    host: str = "127.0.0.1"
    port: int = 9092
    #: The host clients are told to reach this node at (Metadata, FindCoordinator).
    advertised_host: str = "127.0.0.1"
    node_id: int = 0
    auth_enabled: bool = True
    #: The scope of topics named without one.
    scope: str = "kafka"
    #: Topics a producer or a Metadata request names are created when missing.
    auto_create: bool = True
    #: The partitions of a topic created by Kafka's clients without a count.
    partitions: int = 1
    cluster_id: str = "millrace"


@dataclasses.dataclass
class Session:
    """One connection's client."""

    host: str
    principal: str | None = None
    #: SaslHandshake v0 was used: the next frame is the bare PLAIN token.
    raw_sasl: bool = False
    mechanism: str | None = None
    #: Seconds the connection is muted after this reply (its scope is over a rate quota).
    throttle_s: float = 0.0


def _ms(value: Any) -> int:
    """Milliseconds of a kio duration (a timedelta) or an int."""
    seconds = getattr(value, "total_seconds", None)
    return int(seconds() * 1000) if seconds is not None else int(value)


class Handlers:
    """The replies of one node's Kafka listener."""

    def __init__(
        self, settings: KafkaSettings, partitions: Partitions, groups: GroupCoordinator,
        catalog: KafkaCatalog,
    ) -> None:  # fmt: skip
        self.settings = settings
        self.partitions = partitions
        self.groups = groups
        self.catalog = catalog
        #: The node's schema guard and scope quotas, as its wire appends have them (None: none).
        self.schema_guard: SchemaGuard | None = None
        self.quotas: ScopeThrottles | None = None
        self._topics: dict[tuple[str, str], tuple[float, TopicView | None]] = {}
        #: What the catalog judged of a principal's access lately (``TOPIC_CACHE_S``).
        self._judged: dict[tuple[str | None, str, str, str, str], tuple[float, bool]] = {}
        self._producer_ids = 0
        self.table: dict[int, Callable[[Any, int, Session], Awaitable[Any]]] = {
            0: self.produce, 1: self.fetch, 2: self.list_offsets, 3: self.metadata,
            8: self.offset_commit, 9: self.offset_fetch, 10: self.find_coordinator,
            11: self.join_group, 12: self.heartbeat, 13: self.leave_group, 14: self.sync_group,
            15: self.describe_groups, 16: self.list_groups, 17: self.sasl_handshake,
            18: self.api_versions, 19: self.create_topics, 20: self.delete_topics,
            21: self.delete_records, 22: self.init_producer_id, 32: self.describe_configs,
            36: self.sasl_authenticate, 60: self.describe_cluster,
        }  # fmt: skip

    # -- who may -------------------------------------------------------------------------------

    def signed_in(self, session: Session) -> bool:
        return session.principal is not None or not self.settings.auth_enabled

    async def _may(self, session: Session, scope: str, name: str, kind: str, access: str) -> bool:
        if not self.signed_in(session):
            return False
        if not self.settings.auth_enabled:
            return True
        key = (session.principal, scope, name, kind, access)
        now = time.monotonic()
        cached = self._judged.get(key)
        if cached is not None and now - cached[0] < TOPIC_CACHE_S:
            return cached[1]
        verdict = await asyncio.to_thread(self.catalog.may, *key)
        if len(self._judged) > 10_000:
            self._judged.clear()
        self._judged[key] = (now, verdict)
        return verdict

    # -- topics --------------------------------------------------------------------------------

    async def topic(self, name: str) -> TopicView | None:
        """The stream of topic ``name`` (None: none; ``CatalogError``: the name maps to none)."""
        try:
            key = topic_stream(name, self.settings.scope)
        except ValueError as exc:
            raise CatalogError(INVALID_TOPIC_EXCEPTION, str(exc)) from None
        cached = self._topics.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[0] < TOPIC_CACHE_S:
            return cached[1]
        views = await asyncio.to_thread(self.catalog.topics, None, [key])
        view = views[0] if views else None
        self._topics[key] = (now, view)
        return view

    def _forget_topic(self, name: str) -> None:
        with contextlib.suppress(ValueError):
            self._topics.pop(topic_stream(name, self.settings.scope), None)

    async def _partition(
        self, session: Session, name: str, index: int, access: str, create: bool = False
    ) -> tuple[int, PartitionLog | None]:
        """(error code, the partition's log) for a request on ``name``/``index``."""
        try:
            view = await self.topic(name)
            if view is None and create and self.settings.auto_create and self.signed_in(session):
                await self._create(session, name, self.settings.partitions)
                view = await self.topic(name)
        except CatalogError as exc:
            return exc.code, None
        if view is None:
            return UNKNOWN_TOPIC_OR_PARTITION, None
        if not await self._may(session, view.scope, view.stream, "stream", access):
            return TOPIC_AUTHORIZATION_FAILED, None
        if view.refusal is not None:
            return view.refusal[0], None
        if not 0 <= index < len(view.segments):
            return UNKNOWN_TOPIC_OR_PARTITION, None
        try:
            return NONE, await self.partitions.log(view.segments[index])
        except ContainerOfflineError:
            return NOT_LEADER_OR_FOLLOWER, None
        except CorruptPartitionError:
            return KAFKA_STORAGE_ERROR, None

    async def _create(self, session: Session, name: str, partitions: int) -> None:
        scope, stream = topic_stream(name, self.settings.scope)
        await asyncio.to_thread(
            self.catalog.create_topic, session.principal, scope, stream, partitions
        )
        self._forget_topic(name)

    # -- connection set-up -----------------------------------------------------------------------

    async def api_versions(self, request: Any, version: int, session: Session) -> Any:
        keys = [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(codec.SUPPORTED.items())
        ]
        error = NONE if request is not None else UNSUPPORTED_VERSION
        return {"error_code": error, "api_keys": keys, "throttle_time": 0}

    async def sasl_handshake(self, request: Any, version: int, session: Session) -> Any:
        if request.mechanism not in MECHANISMS:
            return {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": list(MECHANISMS)}
        session.mechanism = request.mechanism
        session.raw_sasl = version == 0
        return {"error_code": NONE, "mechanisms": list(MECHANISMS)}

    async def sasl_authenticate(self, request: Any, version: int, session: Session) -> Any:
        if session.mechanism is None:
            return {"error_code": ILLEGAL_SASL_STATE, "error_message": "SaslHandshake first",
                    "auth_bytes": b""}  # fmt: skip
        principal = await self.authenticate_plain(request.auth_bytes)
        if principal is None:
            return {"error_code": SASL_AUTHENTICATION_FAILED, "auth_bytes": b"",
                    "error_message": "Authentication failed: invalid user name or password "
                    "(a Millrace user's password or API token)"}  # fmt: skip
        session.principal = principal
        return {"error_code": NONE, "auth_bytes": b"", "session_lifetime": 0}

    async def authenticate_plain(self, token: bytes) -> str | None:
        """The principal of a SASL/PLAIN token (``authzid NUL user NUL password``)."""
        parts = token.split(b"\0")
        if len(parts) != 3:
            return None
        try:
            user, secret = parts[1].decode(), parts[2].decode()
        except UnicodeDecodeError:
            return None
        if parts[0] and parts[0] != parts[1]:
            return None  # (acting as another user is not offered)
        return await asyncio.to_thread(self.catalog.authenticate, user, secret)

    # -- metadata ------------------------------------------------------------------------------

    def _broker(self) -> dict[str, Any]:
        return {"node_id": self.settings.node_id, "host": self.settings.advertised_host,
                "port": self.settings.port, "rack": None}  # fmt: skip

    def _topic_entry(self, name: str, view: TopicView | None, error: int) -> dict[str, Any]:
        if view is None or error:
            return {"error_code": error or UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                    "partitions": [], "is_internal": False,
                    "topic_id": uuid.UUID(int=0)}  # fmt: skip
        node = self.settings.node_id
        return {
            "error_code": view.refusal[0] if view.refusal else NONE,
            "name": name,
            "topic_id": uuid.uuid5(uuid.NAMESPACE_URL, f"millrace:{view.scope}/{view.stream}"),
            "is_internal": False,
            "topic_authorized_operations": -2147483648,
            "partitions": [
                {"error_code": NONE, "partition_index": index, "leader_id": node,
                 "leader_epoch": 0, "replica_nodes": [node], "isr_nodes": [node],
                 "offline_replicas": []}
                for index in range(len(view.segments))
            ] if view.refusal is None else [],
        }  # fmt: skip

    async def metadata(self, request: Any, version: int, session: Session) -> Any:
        topics: list[dict[str, Any]] = []
        asked = request.topics
        if not self.signed_in(session):
            topics = [self._topic_entry(t.name, None, TOPIC_AUTHORIZATION_FAILED)
                      for t in asked or ()]  # fmt: skip
        elif asked is None:
            views = await asyncio.to_thread(self.catalog.topics, session.principal, None)
            topics = [self._topic_entry(stream_topic(v.scope, v.stream, self.settings.scope), v, 0)
                      for v in views]  # fmt: skip
        else:
            auto = getattr(request, "allow_auto_topic_creation", True) and self.settings.auto_create
            for wanted in asked:
                name = wanted.name
                try:
                    view = await self.topic(name)
                    if view is None and auto:
                        await self._create(session, name, self.settings.partitions)
                        view = await self.topic(name)
                except CatalogError as exc:
                    topics.append(self._topic_entry(name, None, exc.code))
                    continue
                if view is not None and not await self._may(
                    session, view.scope, view.stream, "stream", "READ"
                ):
                    topics.append(self._topic_entry(name, None, TOPIC_AUTHORIZATION_FAILED))
                    continue
                topics.append(self._topic_entry(name, view, 0))
        return {
            "throttle_time": 0, "brokers": [self._broker()], "cluster_id": self.settings.cluster_id,
            "controller_id": self.settings.node_id, "topics": topics,
        }  # fmt: skip

    async def describe_cluster(self, request: Any, version: int, session: Session) -> Any:
        broker = self._broker()
        return {
            "throttle_time": 0, "error_code": NONE, "cluster_id": self.settings.cluster_id,
            "controller_id": self.settings.node_id, "endpoint_type": 1,
            "brokers": [{"broker_id": broker["node_id"], "host": broker["host"],
                         "port": broker["port"], "rack": None}],
            "cluster_authorized_operations": -2147483648,
        }  # fmt: skip

    # -- topics, created and deleted -----------------------------------------------------------

    async def create_topics(self, request: Any, version: int, session: Session) -> Any:
        results = []
        for topic in request.topics:
            entry: dict[str, Any] = {
                "name": topic.name, "error_code": NONE, "num_partitions": topic.num_partitions,
                "replication_factor": 1, "topic_config_error_code": 0,
            }  # fmt: skip
            count = topic.num_partitions if topic.num_partitions > 0 else self.settings.partitions
            entry["num_partitions"] = count
            try:
                if not self.signed_in(session):
                    raise CatalogError(TOPIC_AUTHORIZATION_FAILED, "sign in with SASL first")
                if topic.assignments:
                    raise CatalogError(INVALID_REQUEST, "Millrace places partitions itself: "
                                       "send no replica assignment")  # fmt: skip
                if not 1 <= count <= 1000:
                    raise CatalogError(INVALID_PARTITIONS, "1 to 1000 partitions")
                scope, stream = topic_stream(topic.name, self.settings.scope)
                if not request.validate_only:
                    await asyncio.to_thread(
                        self.catalog.create_topic, session.principal, scope, stream, count
                    )
                    self._forget_topic(topic.name)
            except ValueError as exc:
                entry.update(error_code=INVALID_TOPIC_EXCEPTION, error_message=str(exc))
            except CatalogError as exc:
                entry.update(error_code=exc.code, error_message=str(exc))
            results.append(entry)
        return {"throttle_time": 0, "topics": results}

    async def delete_topics(self, request: Any, version: int, session: Session) -> Any:
        names = request.topic_names if hasattr(request, "topic_names") else [
            t.name for t in request.topics]  # fmt: skip
        responses = []
        for name in names:
            entry: dict[str, Any] = {"name": name, "error_code": NONE}
            try:
                if not self.signed_in(session):
                    raise CatalogError(TOPIC_AUTHORIZATION_FAILED, "sign in with SASL first")
                scope, stream = topic_stream(name, self.settings.scope)
                await asyncio.to_thread(self.catalog.delete_topic, session.principal, scope, stream)
                view = self._topics.get((scope, stream))
                for segment in view[1].segments if view and view[1] else ():
                    self.partitions.forget(segment)
                self._forget_topic(name)
            except ValueError as exc:
                entry.update(error_code=INVALID_TOPIC_EXCEPTION, error_message=str(exc))
            except CatalogError as exc:
                entry.update(error_code=exc.code, error_message=str(exc))
            responses.append(entry)
        return {"throttle_time": 0, "responses": responses}

    async def describe_configs(self, request: Any, version: int, session: Session) -> Any:
        results = []
        for resource in request.resources:
            entry: dict[str, Any] = {
                "error_code": NONE, "resource_type": resource.resource_type,
                "resource_name": resource.resource_name, "configs": [],
            }  # fmt: skip
            if resource.resource_type == 2:  # a topic
                try:
                    view = await self.topic(resource.resource_name)
                except CatalogError as exc:
                    entry.update(error_code=exc.code, error_message=str(exc))
                    results.append(entry)
                    continue
                if view is None or not await self._may(
                    session, view.scope, view.stream, "stream", "READ"
                ):
                    entry["error_code"] = (
                        UNKNOWN_TOPIC_OR_PARTITION if view is None else TOPIC_AUTHORIZATION_FAILED
                    )
                else:
                    keys = resource.configuration_keys
                    entry["configs"] = [
                        {"name": k, "value": v, "read_only": True, "config_source": 5,
                         "is_sensitive": False, "synonyms": [], "config_type": 0}
                        for k, v in sorted(view.configs.items()) if keys is None or k in keys
                    ]  # fmt: skip
            elif resource.resource_type == 4:  # the broker
                entry["configs"] = []
            else:
                entry.update(error_code=INVALID_REQUEST, error_message="topics and brokers only")
            results.append(entry)
        return {"throttle_time": 0, "results": results}

    # -- produce -------------------------------------------------------------------------------

    async def produce(self, request: Any, version: int, session: Session) -> Any:
        if request.transactional_id is not None:
            return self._produce_refused(request, UNSUPPORTED_FOR_MESSAGE_FORMAT,
                                         "transactions are not served")  # fmt: skip
        if request.acks not in (-1, 0, 1):
            return self._produce_refused(request, INVALID_REQUIRED_ACKS, "acks is -1, 0 or 1")
        jobs = []
        for topic in request.topic_data:
            for partition in topic.partition_data:
                jobs.append(self._produce_partition(session, topic.name, partition))
        done = await asyncio.gather(*jobs)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, entry in done:
            by_topic.setdefault(name, []).append(entry)
        if request.acks == 0:
            return None
        return {
            "throttle_time": int(session.throttle_s * 1000),
            "responses": [{"name": name, "partition_responses": entries}
                          for name, entries in by_topic.items()],
        }  # fmt: skip

    def _produce_refused(self, request: Any, code: int, message: str) -> Any:
        return {
            "throttle_time": 0,
            "responses": [
                {"name": topic.name, "partition_responses": [
                    {"index": p.index, "error_code": code, "base_offset": -1,
                     "log_start_offset": -1, "error_message": message}
                    for p in topic.partition_data]}
                for topic in request.topic_data
            ],
        }  # fmt: skip

    async def _produce_partition(
        self, session: Session, name: str, partition: Any
    ) -> tuple[str, dict[str, Any]]:
        entry: dict[str, Any] = {"index": partition.index, "error_code": NONE, "base_offset": -1,
                                 "log_append_time": None, "log_start_offset": -1}  # fmt: skip
        error, log_ = await self._partition(session, name, partition.index, "READ_UPDATE", True)
        if log_ is None:
            entry["error_code"] = error
            return name, entry
        try:
            batches = _batches(bytes(partition.records or b""))
            framed = [frame_values([r.value or b"" for r in batch.records]) for batch in batches]
            for batch, data in zip(batches, framed, strict=True):
                await self._guard(log_.segment, data, len(batch.records), session)
            first: int | None = None
            for batch, data in zip(batches, framed, strict=True):
                writer_id, event_number = None, None
                if batch.producer_id >= 0 and batch.base_sequence >= 0:
                    writer_id = uuid.UUID(
                        int=(batch.producer_id << 16) | batch.producer_epoch & 0xFFFF
                    )
                    event_number = batch.base_sequence + batch.last_offset_delta
                base = await log_.append(batch.records, data, writer_id, event_number)
                if first is None:
                    first = base
            entry["base_offset"] = -1 if first is None else first
        except _BadBatch as exc:
            entry.update(error_code=exc.code, error_message=str(exc))
        except ContainerOfflineError:
            entry["error_code"] = NOT_LEADER_OR_FOLLOWER
        except EngineError as exc:
            entry.update(error_code=KAFKA_STORAGE_ERROR, error_message=str(exc))
        return name, entry

    async def _guard(self, segment: str, data: bytes, count: int, session: Session) -> None:
        """Hold a produce to its stream's schemas and its scope's quotas, as the wire's appends
        are: ``_BadBatch`` (INVALID_RECORD, POLICY_VIOLATION) if refused; a scope over its rate
        mutes the connection for a while (``Session.throttle_s``)."""
        quotas = self.quotas
        if quotas is not None and quotas.allowances:
            reason = quotas.refusal(segment)
            if reason is not None:
                raise _BadBatch(POLICY_VIOLATION, reason)
            scope = quotas.scope_charged(segment, len(data), count)
            if scope is not None:
                session.throttle_s = max(session.throttle_s, quotas.wait(scope))
        guard, stream = self.schema_guard, stream_of(segment)
        if guard is None or stream is None:
            return
        await guard.ready(stream)
        policy = guard.policy(stream) or await guard.reload(stream)
        refusal = judge(policy, data)
        if refusal is UNKNOWN_SCHEMA:  # (a schema registered a moment ago)
            policy = await guard.reload(stream)
            refusal = judge(policy, data, final=True)
        if refusal is not None:
            raise _BadBatch(INVALID_RECORD, str(refusal.error(segment, policy, refusal.index)))

    # -- fetch ---------------------------------------------------------------------------------

    async def fetch(self, request: Any, version: int, session: Session) -> Any:
        deadline = time.monotonic() + min(_ms(request.max_wait), 30_000) / 1000
        budget = request.max_bytes if version >= 3 else 1 << 30
        while True:
            total, responses, waits = 0, [], []
            charged: list[tuple[str, int]] = []
            for topic in request.topics:
                partitions = []
                for asked in topic.partitions:
                    entry, log_ = await self._fetch_partition(
                        session, topic.topic, asked, budget - total
                    )
                    size = len(entry.get("records") or b"")
                    if log_ is not None:
                        waits.append(log_)
                        if size:
                            charged.append((log_.segment, size))
                    total += size
                    partitions.append(entry)
                responses.append({"topic": topic.topic, "partitions": partitions})
            left = deadline - time.monotonic()
            if total >= max(request.min_bytes, 1) or left <= 0 or not waits:
                if self.quotas is not None and self.quotas.allowances:
                    for segment, size in charged:  # (a scope over its read rate: muted)
                        delay = self.quotas.charge_read(segment, size)
                        session.throttle_s = max(session.throttle_s, delay)
                return {"throttle_time": int(session.throttle_s * 1000), "error_code": NONE,
                        "session_id": 0, "responses": responses}  # fmt: skip
            await _first_append(waits, min(left, 0.1))

    async def _fetch_partition(
        self, session: Session, name: str, asked: Any, budget: int
    ) -> tuple[dict[str, Any], PartitionLog | None]:
        entry: dict[str, Any] = {"partition_index": asked.partition, "error_code": NONE,
                                 "high_watermark": -1, "last_stable_offset": -1,
                                 "log_start_offset": -1, "aborted_transactions": None,
                                 "preferred_read_replica": -1, "records": b""}  # fmt: skip
        error, log_ = await self._partition(session, name, asked.partition, "READ")
        if log_ is None:
            entry["error_code"] = error
            return entry, None
        try:
            end = await log_.end_offset()
            start = await log_.start_offset()
            entry.update(high_watermark=end, last_stable_offset=end, log_start_offset=start)
            offset = asked.fetch_offset
            if not start <= offset <= end:
                entry["error_code"] = OFFSET_OUT_OF_RANGE
                return entry, None
            if offset == end or budget <= 0:
                return entry, log_
            values = await log_.read(offset, min(asked.partition_max_bytes, budget))
            meta = await log_.metadata(offset, len(values))
            entry["records"] = _batch_of(offset, values, meta)
        except ContainerOfflineError:
            entry["error_code"] = NOT_LEADER_OR_FOLLOWER
            return entry, None
        except CorruptPartitionError as exc:
            log.warning("Kafka fetch: %s", exc)
            entry["error_code"] = KAFKA_STORAGE_ERROR
            return entry, None
        return entry, log_

    async def list_offsets(self, request: Any, version: int, session: Session) -> Any:
        topics = []
        for topic in request.topics:
            partitions = []
            for asked in topic.partitions:
                entry: dict[str, Any] = {"partition_index": asked.partition_index,
                                         "error_code": NONE, "timestamp": -1, "offset": -1,
                                         "leader_epoch": 0}  # fmt: skip
                error, log_ = await self._partition(
                    session, topic.name, asked.partition_index, "READ"
                )
                if log_ is None:
                    entry["error_code"] = error
                elif asked.timestamp == -2:
                    entry["offset"] = await log_.start_offset()
                else:  # latest (-1); no record keeps a time yet, so any time is the end too
                    entry["offset"] = await log_.end_offset()
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}

    async def delete_records(self, request: Any, version: int, session: Session) -> Any:
        topics = []
        for topic in request.topics:
            partitions = []
            for asked in topic.partitions:
                entry: dict[str, Any] = {"partition_index": asked.partition_index,
                                         "low_watermark": -1, "error_code": NONE}  # fmt: skip
                error, log_ = await self._partition(
                    session, topic.name, asked.partition_index, "READ_UPDATE"
                )
                if log_ is None:
                    entry["error_code"] = error
                    partitions.append(entry)
                    continue
                end = await log_.end_offset()
                offset = end if asked.offset == -1 else asked.offset
                start = await log_.start_offset()
                if not 0 <= offset <= end:
                    entry["error_code"] = OFFSET_OUT_OF_RANGE
                elif offset > start:
                    at = await log_.position_of(offset)
                    await log_.store_checkpoint_at(offset, at)
                    await self.partitions.store.truncate(log_.segment, at)
                    entry["low_watermark"] = offset
                else:
                    entry["low_watermark"] = start
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}

    async def init_producer_id(self, request: Any, version: int, session: Session) -> Any:
        if not self.signed_in(session):
            return {"throttle_time": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}  # fmt: skip
        if request.transactional_id is not None:
            return {"throttle_time": 0, "error_code": COORDINATOR_NOT_AVAILABLE,
                    "producer_id": -1, "producer_epoch": -1}  # fmt: skip
        producer_id = await asyncio.to_thread(self.catalog.next_producer_id)
        return {"throttle_time": 0, "error_code": NONE, "producer_id": producer_id,
                "producer_epoch": 0}  # fmt: skip

    # -- groups --------------------------------------------------------------------------------

    async def _group_allowed(self, session: Session, group: str) -> bool:
        try:
            scope, name = topic_stream(group, self.settings.scope)
        except ValueError:
            scope, name = self.settings.scope, group
        return await self._may(session, scope, name, "reader-group", "READ_UPDATE")

    def _coordinator(self, key: str) -> dict[str, Any]:
        return {"key": key, "node_id": self.settings.node_id,
                "host": self.settings.advertised_host, "port": self.settings.port,
                "error_code": NONE, "error_message": None}  # fmt: skip

    async def find_coordinator(self, request: Any, version: int, session: Session) -> Any:
        keys = list(request.coordinator_keys) if version >= 4 else [request.key]
        found = []
        for key in keys:
            entry = self._coordinator(key)
            if request.key_type != 0:
                entry.update(error_code=COORDINATOR_NOT_AVAILABLE,
                             error_message="transactions are not served", node_id=-1)  # fmt: skip
            found.append(entry)
        if version >= 4:
            return {"throttle_time": 0, "coordinators": found}
        first = found[0]
        return {"throttle_time": 0, "error_code": first["error_code"],
                "error_message": first["error_message"], "node_id": first["node_id"],
                "host": first["host"], "port": first["port"]}  # fmt: skip

    async def join_group(self, request: Any, version: int, session: Session) -> Any:
        failed: dict[str, Any] = {
            "throttle_time": 0, "generation_id": -1, "protocol_name": "", "leader": "",
            "member_id": request.member_id, "members": [],
        }  # fmt: skip
        if not await self._group_allowed(session, request.group_id):
            return {**failed, "error_code": GROUP_AUTHORIZATION_FAILED}
        session_ms = _ms(request.session_timeout)
        rebalance_ms = (
            _ms(getattr(request, "rebalance_timeout", session_ms)) if version >= 1 else session_ms
        )
        try:
            joined = await self.groups.join(
                request.group_id, request.member_id, client_id="", client_host=session.host,
                session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
                protocol_type=request.protocol_type,
                protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
                group_instance_id=getattr(request, "group_instance_id", None),
            )  # fmt: skip
        except GroupError as exc:
            return {**failed, "error_code": exc.code}
        return {
            "throttle_time": 0, "error_code": NONE, "generation_id": joined.generation,
            "protocol_type": joined.protocol_type, "protocol_name": joined.protocol,
            "leader": joined.leader, "member_id": joined.member_id,
            "members": [{"member_id": m, "group_instance_id": i, "metadata": data}
                        for m, i, data in joined.members],
        }  # fmt: skip

    async def sync_group(self, request: Any, version: int, session: Session) -> Any:
        if not await self._group_allowed(session, request.group_id):
            return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "assignment": b""}
        assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
        try:
            kind, protocol, assignment = await self.groups.sync(
                request.group_id, request.generation_id, request.member_id, assignments
            )
        except GroupError as exc:
            return {"throttle_time": 0, "error_code": exc.code, "assignment": b""}
        return {"throttle_time": 0, "error_code": NONE, "protocol_type": kind,
                "protocol_name": protocol, "assignment": assignment}  # fmt: skip

    async def heartbeat(self, request: Any, version: int, session: Session) -> Any:
        if not await self._group_allowed(session, request.group_id):
            return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
        try:
            self.groups.heartbeat(request.group_id, request.generation_id, request.member_id)
        except GroupError as exc:
            return {"throttle_time": 0, "error_code": exc.code}
        return {"throttle_time": 0, "error_code": NONE}

    async def leave_group(self, request: Any, version: int, session: Session) -> Any:
        if not await self._group_allowed(session, request.group_id):
            return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "members": []}
        members = [m.member_id for m in request.members] if version >= 3 else [request.member_id]
        codes = self.groups.leave(request.group_id, members)
        error = codes[members[0]] if version < 3 and members else NONE
        return {
            "throttle_time": 0, "error_code": error,
            "members": [{"member_id": m, "group_instance_id": None, "error_code": c}
                        for m, c in codes.items()],
        }  # fmt: skip

    async def offset_commit(self, request: Any, version: int, session: Session) -> Any:
        code = NONE
        if not await self._group_allowed(session, request.group_id):
            code = GROUP_AUTHORIZATION_FAILED
        else:
            generation: int = getattr(
                request, "generation_id_or_member_epoch", getattr(request, "generation_id", -1)
            )
            try:
                self.groups.check_member(request.group_id, request.member_id, generation)
            except GroupError as exc:
                code = exc.code
        offsets = {}
        if code == NONE:
            for topic in request.topics:
                for p in topic.partitions:
                    offsets[(topic.name, p.partition_index)] = CommittedOffset(
                        p.committed_offset, p.committed_metadata or ""
                    )
            try:
                await asyncio.to_thread(self.catalog.commit_offsets, request.group_id, offsets)
            except CatalogError as exc:
                code = exc.code
        return {
            "throttle_time": 0,
            "topics": [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": code}
                for p in t.partitions]} for t in request.topics],
        }  # fmt: skip

    async def offset_fetch(self, request: Any, version: int, session: Session) -> Any:
        if not await self._group_allowed(session, request.group_id):
            return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "topics": []}
        asked = None
        if request.topics is not None:
            asked = [(t.name, p) for t in request.topics for p in t.partition_indexes]
        stored = await asyncio.to_thread(self.catalog.committed_offsets, request.group_id, asked)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, index in asked if asked is not None else sorted(stored):
            found = stored.get((name, index))
            by_topic.setdefault(name, []).append({
                "partition_index": index, "committed_offset": found.offset if found else -1,
                "committed_leader_epoch": -1, "metadata": found.metadata if found else "",
                "error_code": NONE,
            })  # fmt: skip
        return {"throttle_time": 0, "error_code": NONE,
                "topics": [{"name": n, "partitions": p} for n, p in by_topic.items()]}  # fmt: skip

    async def list_groups(self, request: Any, version: int, session: Session) -> Any:
        groups = []
        wanted = set(getattr(request, "states_filter", ()) or ())
        for group_id in sorted(self.groups.groups):
            described = self.groups.describe(group_id)
            if described is None or (wanted and described["state"] not in wanted):
                continue
            if await self._group_allowed(session, group_id):
                groups.append({"group_id": group_id, "protocol_type": described["protocol_type"],
                               "group_state": described["state"]})  # fmt: skip
        return {"throttle_time": 0, "error_code": NONE, "groups": groups}

    async def describe_groups(self, request: Any, version: int, session: Session) -> Any:
        out = []
        for group_id in request.groups:
            if not await self._group_allowed(session, group_id):
                out.append({"error_code": GROUP_AUTHORIZATION_FAILED, "group_id": group_id,
                            "group_state": "", "protocol_type": "", "protocol_data": "",
                            "members": []})  # fmt: skip
                continue
            described = self.groups.describe(group_id) or {
                "state": "Dead", "protocol_type": "", "protocol": "", "members": []}  # fmt: skip
            out.append({
                "error_code": NONE, "group_id": group_id, "group_state": described["state"],
                "protocol_type": described["protocol_type"], "protocol_data": described["protocol"],
                "authorized_operations": -2147483648,
                "members": [
                    {"member_id": m["member_id"], "group_instance_id": m["group_instance_id"],
                     "client_id": m["client_id"], "client_host": m["client_host"],
                     "member_metadata": m["metadata"], "member_assignment": m["assignment"]}
                    for m in described["members"]
                ],
            })  # fmt: skip
        return {"throttle_time": 0, "groups": out}


# -- record batches -------------------------------------------------------------------------------


class _BadBatch(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _batches(data: bytes) -> list[_Decoded]:
    """The record batches of a produce (v2 only), each checked (``_BadBatch`` if not)."""
    if len(data) > BATCH_BYTES_MAX:
        raise _BadBatch(
            MESSAGE_TOO_LARGE, f"{len(data)} bytes: over {BATCH_BYTES_MAX} in one produce"
        )
    batches: list[_Decoded] = []
    at = 0
    while at < len(data):
        if len(data) - at < 61:
            raise _BadBatch(CORRUPT_MESSAGE, "a record batch shorter than its header")
        _, length = _BATCH_HEAD.unpack_from(data, at)
        end = at + 12 + length
        if length < 49 or end > len(data):
            raise _BadBatch(CORRUPT_MESSAGE, f"a record batch of {length} bytes does not fit")
        magic = data[at + 16]
        if magic != 2:
            raise _BadBatch(UNSUPPORTED_FOR_MESSAGE_FORMAT, f"record batch magic {magic}: v2 only")
        batch = DefaultRecordBatch(data[at:end])
        if not batch.validate_crc():
            raise _BadBatch(CORRUPT_MESSAGE, "a record batch's CRC does not match")
        if batch.is_control_batch or batch.is_transactional:
            raise _BadBatch(UNSUPPORTED_FOR_MESSAGE_FORMAT, "transactional batches are not served")
        try:
            records = list(batch)
        except Exception as exc:  # (what the codec raises for a body that does not decode)
            raise _BadBatch(CORRUPT_MESSAGE, f"a record batch does not decode: {exc}") from None
        batches.append(_Decoded(batch, records))
        at = end
    return batches


class _Decoded:
    """A checked batch and its records."""

    def __init__(self, batch: DefaultRecordBatch, records: Sequence[Any]) -> None:
        self.records = records
        self.producer_id = batch.producer_id
        self.producer_epoch = batch.producer_epoch
        self.base_sequence = batch.base_sequence
        self.last_offset_delta = batch.last_offset_delta

    def __iter__(self) -> Any:
        return iter(self.records)


def _batch_of(base: int, values: Sequence[bytes], meta: dict[int, RecordMeta]) -> bytes:
    """One record batch of ``values`` numbered from ``base``, with the times, keys and headers
    ``meta`` has for them (none: no time, no key)."""
    if not values:
        return b""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    for delta, value in enumerate(values):
        found = meta.get(base + delta)
        if found is None:
            builder.append(delta, timestamp=-1, key=None, value=value, headers=[])
        else:
            builder.append(delta, timestamp=found[0], key=found[1], value=value, headers=found[2])
    data = builder.build()
    _INT64.pack_into(data, 0, base)
    return bytes(data)


async def _first_append(logs: Sequence[PartitionLog], timeout: float) -> None:
    """Until one of ``logs`` is appended to through Kafka, or ``timeout`` (others' appends are
    seen at the next look)."""
    waits = [asyncio.ensure_future(log_.appended.wait()) for log_ in logs]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
