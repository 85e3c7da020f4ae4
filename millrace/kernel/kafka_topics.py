"""How Kafka's topics are Millrace's streams, and what a node's Kafka listener asks of the
metadata it does not hold (docs/components/kafka.md).

A topic is a stream; a partition is one of the stream's segments. ``topic_stream`` names the
stream of a topic: ``<scope>.<stream>`` (split at the first dot) is that scope's stream, and a
name without a dot is a stream of the Kafka scope (``MILLRACE_KAFKA_SCOPE``, ``kafka``).
``stream_topic`` is the name a stream is listed under: bare in the Kafka scope, else
``<scope>.<stream>``. This matches Confluent's serializers, whose default subject for topic
``<scope>.<stream>`` is the stream's default value subject (``default_subject``).

``KafkaCatalog`` is the port a node's Kafka listener reads and changes that metadata through
(``controller_app.kafka_catalog.DatabaseKafkaCatalog`` implements it from the metadata
database); here, below both, so that neither imports the other. Its calls block: the listener
runs them on a thread.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Protocol

__all__ = [
    "DEFAULT_KAFKA_SCOPE",
    "CatalogError",
    "ClusterView",
    "CommittedOffset",
    "KafkaCatalog",
    "TopicView",
    "stream_topic",
    "topic_stream",
]

#: The scope of topics named without one.
DEFAULT_KAFKA_SCOPE = "kafka"

#: A Millrace scope or stream name (``controller_app.workflows.config.NAME_PATTERN``, without
#: the internal ``_`` prefix: internal streams are not topics).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]*$")
#: Kafka's longest topic name.
TOPIC_LENGTH_MAX = 249


def topic_stream(topic: str, kafka_scope: str = DEFAULT_KAFKA_SCOPE) -> tuple[str, str]:
    """``(scope, stream)`` of ``topic``; ``ValueError`` saying why a name maps to no stream."""
    if not topic or len(topic) > TOPIC_LENGTH_MAX:
        raise ValueError(f"a topic name has 1 to {TOPIC_LENGTH_MAX} characters")
    scope, dot, stream = topic.partition(".")
    if not dot:
        scope, stream = kafka_scope, topic
    for what, name in (("scope", scope), ("stream", stream)):
        if not _NAME.match(name):
            raise ValueError(
                f"topic {topic!r} names {what} {name!r}: Millrace's names start with a letter or "
                "digit and hold letters, digits, '.' and '-' ('_' is not allowed)"
            )
    return scope, stream


def stream_topic(scope: str, stream: str, kafka_scope: str = DEFAULT_KAFKA_SCOPE) -> str:
    """The topic ``scope/stream`` is listed under (``topic_stream`` of it gives it back)."""
    if scope == kafka_scope and "." not in stream:
        return stream
    return f"{scope}.{stream}"


class CatalogError(Exception):
    """A refusal of the catalog's: ``code`` is Kafka's error code to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class TopicView:
    """A stream as Kafka's clients see it."""

    scope: str
    stream: str
    #: The qualified names of its partitions' segments, partition 0 first (by key range).
    segments: tuple[str, ...]
    #: Why it is not served through Kafka (Kafka's error code, the reason); None: served.
    refusal: tuple[int, str] | None = None
    #: Its stream's configuration as Kafka's topic configs (DescribeConfigs).
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ClusterView:
    """The cluster as Kafka's clients are told it: each node whose listener reported lately,
    by node id, as (broker id, host, Kafka port); and each container's owner, by node id."""

    brokers: Mapping[str, tuple[int, str, int]]
    owners: Mapping[int, str]


@dataclasses.dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str = ""


class KafkaCatalog(Protocol):
    """The metadata a Kafka listener reads and changes (blocking; run on a thread)."""

    def authenticate(self, username: str, secret: str) -> str | None:
        """The principal (user name) whose password or API token ``secret`` is; None: none."""

    def topics(
        self, principal: str | None, wanted: Sequence[tuple[str, str]] | None
    ) -> list[TopicView]:
        """The streams ``principal`` may read, of ``wanted`` (``(scope, stream)``) or all."""

    def may(self, principal: str | None, scope: str, name: str, kind: str, access: str) -> bool:
        """Whether ``principal`` may ``access`` (``READ``, ``READ_UPDATE``, ``MANAGE``) the
        ``kind`` (``stream`` or ``reader-group``) ``scope/name``."""

    def create_topic(self, principal: str | None, scope: str, stream: str, partitions: int) -> None:
        """Create the stream with a fixed number of segments; ``CatalogError`` if not."""

    def delete_topic(self, principal: str | None, scope: str, stream: str) -> None:
        """Seal and delete the stream; ``CatalogError`` if not."""

    def commit_offsets(
        self, group: str, offsets: Mapping[tuple[str, int], CommittedOffset]
    ) -> None:
        """Store the group's committed offsets (topic, partition) durably."""

    def committed_offsets(
        self, group: str, partitions: Sequence[tuple[str, int]] | None
    ) -> dict[tuple[str, int], CommittedOffset]:
        """The group's committed offsets, of ``partitions`` or all."""

    def next_producer_id(self) -> int:
        """A producer id no other producer of the cluster was given."""

    def cluster(self) -> ClusterView:
        """The live nodes' listeners and the containers' owners (a cluster's nodes ask)."""

    def report(self, node: str, report: Mapping[str, object]) -> None:
        """Keep what the node's listener says of itself (its groups, its partitions' ends)
        for the controller's views."""
