"""What every Kafka request is answered with: the node's settings and state (``Context``), who
the client is (``Session``), and Kafka's error codes by name.

Responsibility: the pieces the request modules (``admin_requests``, ``record_requests``,
``group_requests``) share: the node's partitions, groups and catalog (``KafkaCatalog``, called on
a thread), the topics and access judgements it remembers for ``TOPIC_CACHE_S``, and signing in
with SASL/PLAIN.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
import time
from typing import Any

from millrace.kernel.kafka_topics import (
    CatalogError,
    ClusterView,
    KafkaCatalog,
    TopicView,
    topic_stream,
)
from millrace.kernel.naming import container_for
from segment_app.engine.errors import ContainerOfflineError
from segment_app.kafka.groups import GroupCoordinator
from segment_app.kafka.partitions import (
    CorruptPartitionError,
    PartitionLog,
    Partitions,
)
from segment_app.server.quotas import ScopeThrottles
from segment_app.server.schema_guard import SchemaGuard

__all__ = [
    "BATCH_BYTES_MAX",
    "CLUSTER_AUTHORIZATION_FAILED",
    "COORDINATOR_NOT_AVAILABLE",
    "CORRUPT_MESSAGE",
    "GROUPS_KEY",
    "GROUP_AUTHORIZATION_FAILED",
    "GROUP_ID_NOT_FOUND",
    "ILLEGAL_SASL_STATE",
    "INVALID_PARTITIONS",
    "INVALID_RECORD",
    "INVALID_REQUEST",
    "INVALID_REQUIRED_ACKS",
    "INVALID_TOPIC_EXCEPTION",
    "KAFKA_STORAGE_ERROR",
    "LEADER_NOT_AVAILABLE",
    "MECHANISMS",
    "MESSAGE_TOO_LARGE",
    "NONE",
    "NOT_COORDINATOR",
    "NOT_LEADER_OR_FOLLOWER",
    "OFFSET_OUT_OF_RANGE",
    "POLICY_VIOLATION",
    "SASL_AUTHENTICATION_FAILED",
    "TOPIC_AUTHORIZATION_FAILED",
    "TOPIC_CACHE_S",
    "UNKNOWN_SERVER_ERROR",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    "UNSUPPORTED_SASL_MECHANISM",
    "UNSUPPORTED_VERSION",
    "Context",
    "KafkaSettings",
    "Session",
    "milliseconds",
]

log = logging.getLogger(__name__)

#: What a group's coordinator is chosen by: the container of ``<GROUPS_KEY>/<group>``.
GROUPS_KEY = "_kafka/groups"

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
NOT_COORDINATOR = 16
LEADER_NOT_AVAILABLE = 5
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
    #: The node's name in what it reports (its advertised address, or host:port).
    node_name: str = ""
    #: The node is one of a cluster's: partitions are led, and groups coordinated, by the
    #: nodes that own their containers (``Context.view``); else by this node alone.
    clustered: bool = False
    container_count: int = 4


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
    #: The client's id, as its requests name it.
    client_id: str = ""


def milliseconds(value: Any) -> int:
    """Milliseconds of a kio duration (a timedelta) or an int."""
    seconds = getattr(value, "total_seconds", None)
    return int(seconds() * 1000) if seconds is not None else int(value)


class Context:
    """What every request of one node's Kafka listener is answered with: the node's settings,
    partitions, groups and catalog, and what it remembers of topics and access."""

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
        self.topics_seen: dict[tuple[str, str], tuple[float, TopicView | None]] = {}
        #: The cluster as last read (a cluster's node; None: not yet, or a node of its own).
        self.view: ClusterView | None = None
        #: What the catalog judged of a principal's access lately (``TOPIC_CACHE_S``).
        self._judged: dict[tuple[str | None, str, str, str, str], tuple[float, bool]] = {}

    # -- the cluster as Kafka's clients see it --------------------------------------------

    def brokers(self) -> list[dict[str, Any]]:
        """Every node whose listener reported lately (this one alone outside a cluster)."""
        settings = self.settings
        me: dict[str, Any] = {"node_id": self.broker_id(), "host": settings.advertised_host,
                              "port": settings.port, "rack": None}  # fmt: skip
        if self.view is None:
            return [me]
        found: list[dict[str, Any]] = [
            {"node_id": b[0], "host": b[1], "port": b[2], "rack": None}
            for b in self.view.brokers.values()
        ]
        if not any(b["node_id"] == me["node_id"] for b in found):
            found.append(me)
        return sorted(found, key=lambda b: int(b["node_id"]))

    def broker_id(self) -> int:
        view = self.view
        if view is None:
            return self.settings.node_id
        mine = view.brokers.get(self.settings.node_name)
        return mine[0] if mine is not None else self.settings.node_id

    def leader_of(self, name: str) -> int:
        """The broker id of the node that owns ``name``'s container (-1: none known now);
        outside a cluster, this node."""
        if self.view is None:
            return self.broker_id()
        owner = self.view.owners.get(container_for(name, self.settings.container_count))
        broker = self.view.brokers.get(owner or "")
        return broker[0] if broker is not None else -1

    def coordinator_of(self, group: str) -> dict[str, Any] | None:
        """The node that coordinates ``group``: the owner of its key's container."""
        leader = self.leader_of(f"{GROUPS_KEY}/{group}")
        return next((b for b in self.brokers() if b["node_id"] == leader), None)

    def coordinates(self, group: str) -> bool:
        return self.leader_of(f"{GROUPS_KEY}/{group}") == self.broker_id()

    # -- who may -------------------------------------------------------------------------------

    def signed_in(self, session: Session) -> bool:
        return session.principal is not None or not self.settings.auth_enabled

    async def may(self, session: Session, scope: str, name: str, kind: str, access: str) -> bool:
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
        cached = self.topics_seen.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[0] < TOPIC_CACHE_S:
            return cached[1]
        views = await asyncio.to_thread(self.catalog.topics, None, [key])
        view = views[0] if views else None
        self.topics_seen[key] = (now, view)
        return view

    def forget_topic(self, name: str) -> None:
        with contextlib.suppress(ValueError):
            self.topics_seen.pop(topic_stream(name, self.settings.scope), None)

    async def partition(
        self, session: Session, name: str, index: int, access: str, create: bool = False
    ) -> tuple[int, PartitionLog | None]:
        """(error code, the partition's log) for a request on ``name``/``index``. When the
        metadata database does not answer, the node cannot tell whether it leads the partition
        (a node cut from it loses its containers to the others): ``NOT_LEADER_OR_FOLLOWER``,
        so that the client asks ``Metadata`` again, of another node."""
        try:
            view = await self.topic(name)
            if view is None and create and self.settings.auto_create and self.signed_in(session):
                await self.create(session, name, self.settings.partitions)
                view = await self.topic(name)
            allowed = view is not None and await self.may(
                session, view.scope, view.stream, "stream", access
            )
        except CatalogError as exc:
            return exc.code, None
        except Exception as exc:  # (the metadata database away)
            log.warning("Kafka partition %s-%d: the catalog did not answer: %s", name, index, exc)
            return NOT_LEADER_OR_FOLLOWER, None
        if view is None:
            return UNKNOWN_TOPIC_OR_PARTITION, None
        if not allowed:
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

    async def create(self, session: Session, name: str, partitions: int) -> None:
        scope, stream = topic_stream(name, self.settings.scope)
        await asyncio.to_thread(
            self.catalog.create_topic, session.principal, scope, stream, partitions
        )
        self.forget_topic(name)

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
