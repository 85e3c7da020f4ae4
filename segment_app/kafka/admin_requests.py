"""Kafka's requests about the cluster, topics and signing in: ApiVersions, SaslHandshake,
SaslAuthenticate, Metadata, DescribeCluster, CreateTopics, DeleteTopics, DescribeConfigs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterator
from typing import Any

from millrace.kernel.kafka_topics import (
    CatalogError,
    TopicView,
    stream_topic,
    topic_stream,
)
from segment_app.kafka import codec
from segment_app.kafka.context import (
    ILLEGAL_SASL_STATE,
    INVALID_PARTITIONS,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    LEADER_NOT_AVAILABLE,
    MECHANISMS,
    NONE,
    SASL_AUTHENTICATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_SASL_MECHANISM,
    UNSUPPORTED_VERSION,
    Context,
    Session,
)

__all__ = ["AdminRequests"]

log = logging.getLogger(__name__)


class AdminRequests:
    """The replies about the cluster, its topics and signing in."""

    def __init__(self, context: Context) -> None:
        self.context = context

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
        principal = await self.context.authenticate_plain(request.auth_bytes)
        if principal is None:
            return {"error_code": SASL_AUTHENTICATION_FAILED, "auth_bytes": b"",
                    "error_message": "Authentication failed: invalid user name or password "
                    "(a Millrace user's password or API token)"}  # fmt: skip
        session.principal = principal
        return {"error_code": NONE, "auth_bytes": b"", "session_lifetime": 0}

    # -- metadata ------------------------------------------------------------------------------

    def _topic_entry(self, name: str, view: TopicView | None, error: int) -> dict[str, Any]:
        if view is None or error:
            return {"error_code": error or UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                    "partitions": [], "is_internal": False,
                    "topic_id": uuid.UUID(int=0)}  # fmt: skip
        leaders = [self.context.leader_of(segment) for segment in view.segments]
        return {
            "error_code": view.refusal[0] if view.refusal else NONE,
            "name": name,
            "topic_id": uuid.uuid5(uuid.NAMESPACE_URL, f"millrace:{view.scope}/{view.stream}"),
            "is_internal": False,
            "topic_authorized_operations": -2147483648,
            "partitions": [
                {"error_code": NONE if node >= 0 else LEADER_NOT_AVAILABLE,
                 "partition_index": index, "leader_id": node, "leader_epoch": 0,
                 "replica_nodes": [node] if node >= 0 else [],
                 "isr_nodes": [node] if node >= 0 else [], "offline_replicas": []}
                for index, node in enumerate(leaders)
            ] if view.refusal is None else [],
        }  # fmt: skip

    async def metadata(self, request: Any, version: int, session: Session) -> Any:
        topics: list[dict[str, Any]] = []
        asked = request.topics
        if not self.context.signed_in(session):
            topics = [self._topic_entry(t.name, None, TOPIC_AUTHORIZATION_FAILED)
                      for t in asked or ()]  # fmt: skip
        elif asked is None:
            views = await asyncio.to_thread(self.context.catalog.topics, session.principal, None)
            scope = self.context.settings.scope
            topics = [self._topic_entry(stream_topic(v.scope, v.stream, scope), v, 0)
                      for v in views]  # fmt: skip
        else:
            auto = (
                getattr(request, "allow_auto_topic_creation", True)
                and self.context.settings.auto_create
            )
            for wanted in asked:
                name = wanted.name
                try:
                    view = await self.context.topic(name)
                    if view is None and auto:
                        await self.context.create(session, name, self.context.settings.partitions)
                        view = await self.context.topic(name)
                except CatalogError as exc:
                    topics.append(self._topic_entry(name, None, exc.code))
                    continue
                if view is not None and not await self.context.may(
                    session, view.scope, view.stream, "stream", "READ"
                ):
                    topics.append(self._topic_entry(name, None, TOPIC_AUTHORIZATION_FAILED))
                    continue
                topics.append(self._topic_entry(name, view, 0))
        return {
            "throttle_time": 0, "brokers": self.context.brokers(),
            "cluster_id": self.context.settings.cluster_id,
            "controller_id": self.context.broker_id(), "topics": topics,
        }  # fmt: skip

    async def describe_cluster(self, request: Any, version: int, session: Session) -> Any:
        return {
            "throttle_time": 0, "error_code": NONE, "cluster_id": self.context.settings.cluster_id,
            "controller_id": self.context.broker_id(), "endpoint_type": 1,
            "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"],
                         "rack": None} for b in self.context.brokers()],
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
            count = (
                topic.num_partitions
                if topic.num_partitions > 0
                else self.context.settings.partitions
            )
            entry["num_partitions"] = count
            with _refusals(entry):
                if not self.context.signed_in(session):
                    raise CatalogError(TOPIC_AUTHORIZATION_FAILED, "sign in with SASL first")
                if topic.assignments:
                    raise CatalogError(INVALID_REQUEST, "Millrace places partitions itself: "
                                       "send no replica assignment")  # fmt: skip
                if not 1 <= count <= 1000:
                    raise CatalogError(INVALID_PARTITIONS, "1 to 1000 partitions")
                scope, stream = topic_stream(topic.name, self.context.settings.scope)
                if not request.validate_only:
                    await asyncio.to_thread(
                        self.context.catalog.create_topic, session.principal, scope, stream, count
                    )
                    self.context.forget_topic(topic.name)
            results.append(entry)
        return {"throttle_time": 0, "topics": results}

    async def delete_topics(self, request: Any, version: int, session: Session) -> Any:
        names = request.topic_names if hasattr(request, "topic_names") else [
            t.name for t in request.topics]  # fmt: skip
        responses = []
        for name in names:
            entry: dict[str, Any] = {"name": name, "error_code": NONE}
            with _refusals(entry):
                if not self.context.signed_in(session):
                    raise CatalogError(TOPIC_AUTHORIZATION_FAILED, "sign in with SASL first")
                scope, stream = topic_stream(name, self.context.settings.scope)
                await asyncio.to_thread(
                    self.context.catalog.delete_topic, session.principal, scope, stream
                )
                view = self.context.topics_seen.get((scope, stream))
                for segment in view[1].segments if view and view[1] else ():
                    self.context.partitions.forget(segment)
                self.context.forget_topic(name)
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
                    view = await self.context.topic(resource.resource_name)
                except CatalogError as exc:
                    entry.update(error_code=exc.code, error_message=str(exc))
                    results.append(entry)
                    continue
                if view is None or not await self.context.may(
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


@contextlib.contextmanager
def _refusals(entry: dict[str, Any]) -> Iterator[None]:
    """A topic's name that maps to no stream, or the catalog's refusal, as its entry's error."""
    try:
        yield
    except ValueError as exc:
        entry.update(error_code=INVALID_TOPIC_EXCEPTION, error_message=str(exc))
    except CatalogError as exc:
        entry.update(error_code=exc.code, error_message=str(exc))
