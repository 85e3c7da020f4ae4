"""``DatabaseKafkaCatalog``: a node's Kafka listener's metadata, from the metadata database.

Implements ``millrace.kernel.kafka_topics.KafkaCatalog`` (blocking; the listener calls it on a
thread). Topics are streams (``topic_stream``); a topic is served when its stream has a fixed
number of segments and was never scaled, so that a partition is one segment for the stream's
life. Topics are created and deleted through the streams' workflows, with the same grants as
REST (MANAGE on the scope to create, on the stream to delete). Users sign in with their
password or their API token. This module is the home of the records Kafka's clients leave:
committed offsets and producer ids (``controller_app.models.kafka``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from django.contrib.auth import get_user_model
from django.db import close_old_connections, transaction
from django.utils import timezone

from controller_app import errors
from controller_app import selectors as sel
from controller_app.access import grants, tokens
from controller_app.choices import ScalingPolicyType, StreamState
from controller_app.models import (
    ContainerAssignment,
    KafkaCommittedOffset,
    KafkaGroupLag,
    KafkaNodeReport,
    KafkaProducerId,
    Node,
    Scope,
    Stream,
)
from controller_app.segment_client import segment_store
from controller_app.segments import decode_segments
from controller_app.workflows import scopes, streams
from controller_app.workflows.config import StreamConfig
from millrace.kernel.kafka_topics import (
    DEFAULT_KAFKA_SCOPE,
    CatalogError,
    ClusterView,
    CommittedOffset,
    TopicView,
)
from millrace.kernel.naming import qualified_segment_name, segment_id

__all__ = [
    "DatabaseKafkaCatalog", "Reported", "committed_offsets", "kafka_groups", "reported",
]  # fmt: skip

#: A node's report older than this is left out of the views (the node writes it when it changes,
#: and at least every 10 s).
REPORT_FRESH_S = 30

# Kafka's error codes the catalog answers with.
TOPIC_ALREADY_EXISTS = 36
INVALID_TOPIC_EXCEPTION = 17
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_AUTHORIZATION_FAILED = 29
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
KAFKA_STORAGE_ERROR = 56

_ACCESS = {"READ": grants.READ, "READ_UPDATE": grants.READ_UPDATE, "MANAGE": grants.MANAGE}


class DatabaseKafkaCatalog:
    """Topics, users, committed offsets and producer ids, from the metadata database."""

    def __init__(self, kafka_scope: str = DEFAULT_KAFKA_SCOPE) -> None:
        self.kafka_scope = kafka_scope

    # -- who ---------------------------------------------------------------------------------

    def _user(self, principal: str | None) -> Any:
        if principal is None:
            return None
        return get_user_model().objects.filter(username=principal, is_active=True).first()

    def authenticate(self, username: str, secret: str) -> str | None:
        close_old_connections()
        user = self._user(username)
        if user is None:
            return None
        try:
            by_token = tokens.user_of(secret)
        except tokens.TokenExpiredError:
            by_token = None
        if by_token is not None and by_token.pk == user.pk:
            return str(user.username)
        return str(user.username) if user.check_password(secret) else None

    def may(self, principal: str | None, scope: str, name: str, kind: str, access: str) -> bool:
        close_old_connections()
        user = self._user(principal)
        if kind == "reader-group":
            resource = grants.reader_group_resource(scope, name)
        else:
            resource = grants.stream_prn(scope, name)
        return grants.allowed(user, resource, _ACCESS[access])

    # -- topics --------------------------------------------------------------------------------

    def topics(
        self, principal: str | None, wanted: Sequence[tuple[str, str]] | None
    ) -> list[TopicView]:
        close_old_connections()
        rows = Stream.objects.select_related("scope").filter(
            state__in=(StreamState.ACTIVE, StreamState.SEALED)
        )
        if wanted is not None:
            found = []
            for scope, name in wanted:
                row = rows.filter(scope__name=scope, name=name).first()
                if row is not None:
                    found.append(row)
            listed = found
        else:
            listed = [row for row in rows.order_by("scope__name", "name")
                      if not row.name.startswith(sel.INTERNAL_PREFIX)
                      and not row.scope.name.startswith(sel.INTERNAL_PREFIX)]  # fmt: skip
            user = self._user(principal)
            listed = [row for row in listed if grants.allowed(
                user, grants.stream_prn(row.scope.name, row.name), grants.READ)]  # fmt: skip
        return [self._view(row) for row in listed]

    def _view(self, row: Stream) -> TopicView:
        scope = row.scope.name
        configs = {
            "cleanup.policy": "delete",
            "retention.ms": str(row.retention_value if row.retention_type == "TIME" else -1),
            "retention.bytes": str(row.retention_value if row.retention_type == "SIZE" else -1),
            "millrace.stream": f"{scope}/{row.name}",
        }
        if row.scaling_type != ScalingPolicyType.FIXED_NUM_SEGMENTS or row.current_epoch != 0:
            fixed = row.scaling_type == ScalingPolicyType.FIXED_NUM_SEGMENTS
            why = (
                f"stream {scope}/{row.name} "
                + ("was scaled" if fixed else "scales by its traffic")
                + ": Kafka's partitions are fixed, so only streams with a fixed number of "
                "segments never scaled are topics"
            )  # fmt: skip
            return TopicView(scope, row.name, (), (INVALID_TOPIC_EXCEPTION, why), configs)
        epoch = sel.current_epoch(row)
        segments = sorted(decode_segments(epoch.segments), key=lambda s: s.key_start)
        names = tuple(
            qualified_segment_name(scope, row.name, segment_id(s.creation_epoch, s.number))
            for s in segments
        )
        return TopicView(scope, row.name, names, None, configs)

    def create_topic(self, principal: str | None, scope: str, stream: str, partitions: int) -> None:
        close_old_connections()
        user = self._user(principal)
        if not grants.allowed(user, grants.scope_resource(scope), grants.MANAGE):
            raise CatalogError(TOPIC_AUTHORIZATION_FAILED,
                               f"{principal} may not create streams in scope {scope}")  # fmt: skip
        if not Scope.objects.filter(name=scope).exists():
            if scope != self.kafka_scope:
                raise CatalogError(UNKNOWN_TOPIC_OR_PARTITION, f"no scope {scope}")
            with contextlib.suppress(errors.AlreadyExistsError):
                scopes.create_scope(scope)
        config = StreamConfig(
            scaling_type=ScalingPolicyType.FIXED_NUM_SEGMENTS, min_segments=partitions
        )
        try:
            streams.create_stream(segment_store(), scope, stream, config)
        except errors.AlreadyExistsError as exc:
            raise CatalogError(TOPIC_ALREADY_EXISTS, str(exc)) from None
        except errors.InvalidArgumentError as exc:
            raise CatalogError(INVALID_REQUEST, str(exc)) from None
        except errors.ControllerError as exc:
            raise CatalogError(KAFKA_STORAGE_ERROR, str(exc)) from None

    def delete_topic(self, principal: str | None, scope: str, stream: str) -> None:
        close_old_connections()
        user = self._user(principal)
        if not grants.allowed(user, grants.stream_prn(scope, stream), grants.MANAGE):
            raise CatalogError(TOPIC_AUTHORIZATION_FAILED,
                               f"{principal} may not delete stream {scope}/{stream}")  # fmt: skip
        try:
            streams.seal_stream(scope, stream)
            streams.delete_stream(scope, stream)
        except errors.NotFoundError:
            raise CatalogError(UNKNOWN_TOPIC_OR_PARTITION, f"no topic {scope}.{stream}") from None
        except errors.ControllerError as exc:
            raise CatalogError(KAFKA_STORAGE_ERROR, str(exc)) from None

    # -- groups' offsets and producers ----------------------------------------------------------

    def commit_offsets(
        self, group: str, offsets: Mapping[tuple[str, int], CommittedOffset]
    ) -> None:
        close_old_connections()
        with transaction.atomic():
            for (topic, partition), committed in offsets.items():
                KafkaCommittedOffset.objects.update_or_create(
                    group=group, topic=topic, partition=partition,
                    defaults={"offset": committed.offset, "metadata": committed.metadata},
                )  # fmt: skip

    def committed_offsets(
        self, group: str, partitions: Sequence[tuple[str, int]] | None
    ) -> dict[tuple[str, int], CommittedOffset]:
        close_old_connections()
        rows = KafkaCommittedOffset.objects.filter(group=group)
        if partitions is not None:
            rows = rows.filter(topic__in={topic for topic, _ in partitions})
        return {
            (row.topic, row.partition): CommittedOffset(row.offset, row.metadata) for row in rows
        }

    def next_producer_id(self) -> int:
        close_old_connections()
        return int(KafkaProducerId.objects.create().pk)

    def cluster(self) -> ClusterView:
        close_old_connections()
        fresh = timezone.now() - datetime.timedelta(seconds=REPORT_FRESH_S)
        reports = {
            row.node: str(row.report.get("bootstrap", ""))
            for row in KafkaNodeReport.objects.filter(updated_at__gte=fresh)
        }
        ids = dict(Node.objects.filter(node_id__in=reports).values_list("node_id", "pk"))
        brokers = {}
        for node, bootstrap in reports.items():
            host, _, port = bootstrap.rpartition(":")
            if node in ids and port.isdigit():
                brokers[node] = (int(ids[node]), host, int(port))
        owners = dict(ContainerAssignment.objects.values_list("container__number", "node__node_id"))
        return ClusterView(brokers, owners)

    def report(self, node: str, report: Mapping[str, object]) -> None:
        close_old_connections()
        KafkaNodeReport.objects.update_or_create(node=node, defaults={"report": dict(report)})


@dataclasses.dataclass
class Reported:
    """What the nodes' fresh reports say: the listeners, each partition's end offset and the
    bytes stored before it (``topic/partition``), and the live groups (with their
    coordinating node)."""

    reports: list[KafkaNodeReport]
    ends: dict[str, int]
    sizes: dict[str, int]
    live: dict[str, dict[str, Any]]


def reported() -> Reported:
    """The nodes' reports of the last ``REPORT_FRESH_S``."""
    fresh = timezone.now() - datetime.timedelta(seconds=REPORT_FRESH_S)
    reports = list(KafkaNodeReport.objects.filter(updated_at__gte=fresh).order_by("node"))
    found = Reported(reports, {}, {}, {})
    for row in reports:
        found.ends.update({k: int(v) for k, v in dict(row.report.get("ends", {})).items()})
        found.sizes.update({k: int(v) for k, v in dict(row.report.get("sizes", {})).items()})
        for group in row.report.get("groups", []):
            found.live[group["group"]] = {**group, "coordinator": row.node}
    return found


def committed_offsets() -> dict[str, list[KafkaCommittedOffset]]:
    """Each group's committed offsets, by topic and partition."""
    committed: dict[str, list[KafkaCommittedOffset]] = {}
    for offset in KafkaCommittedOffset.objects.order_by("group", "topic", "partition"):
        committed.setdefault(offset.group, []).append(offset)
    return committed


def kafka_groups() -> dict[str, Any]:
    """The Kafka listeners and consumer groups as the nodes last reported them (fresh reports
    only), each group with its members and, per partition, the offset committed, the end and
    the lag in records; groups that only committed offsets are listed too (no members). Each
    group's status and its lag in bytes and seconds are the lag round's
    (``controller_app.kafka_lag``; absent until a round measured the group)."""
    seen = reported()
    committed = committed_offsets()
    measured = {row.group: row.report for row in KafkaGroupLag.objects.all()}
    groups = []
    for name in sorted(set(seen.live) | set(committed)):
        judged = measured.get(name, {})
        by_key = {f"{p['topic']}/{p['partition']}": p for p in judged.get("partitions", [])}
        partitions: list[dict[str, Any]] = []
        for offset in committed.get(name, []):
            key = f"{offset.topic}/{offset.partition}"
            end = seen.ends.get(key)
            partitions.append({
                "topic": offset.topic, "partition": offset.partition, "committed": offset.offset,
                "end": end, "lag": None if end is None else max(end - offset.offset, 0),
                "lagBytes": by_key.get(key, {}).get("lagBytes"),
                "lagSeconds": by_key.get(key, {}).get("lagSeconds"),
            })  # fmt: skip
        found = seen.live.get(name, {})
        groups.append({
            "group": name, "state": found.get("state", "Empty"),
            "coordinator": found.get("coordinator"), "protocol": found.get("protocol", ""),
            "generation": found.get("generation"), "members": found.get("members", []),
            "partitions": partitions,
            "lag": sum(p["lag"] or 0 for p in partitions),
            "status": judged.get("status"), "reason": judged.get("reason"),
            "lagBytes": judged.get("lagBytes"), "lagSeconds": judged.get("lagSeconds"),
            "computedAtMs": judged.get("computedAtMs"),
        })  # fmt: skip
    listeners = [{"node": r.node, "bootstrap": r.report.get("bootstrap"),
                  "updatedAt": r.updated_at.isoformat()} for r in seen.reports]  # fmt: skip
    return {"listeners": listeners, "groups": groups}
