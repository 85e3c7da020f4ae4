"""Kafka's requests about consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups (the coordinator is
``segment_app.kafka.groups``; committed offsets go to the catalog)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from millrace.kernel.kafka_topics import (
    CatalogError,
    CommittedOffset,
    topic_stream,
)
from segment_app.kafka.context import (
    COORDINATOR_NOT_AVAILABLE,
    GROUP_AUTHORIZATION_FAILED,
    NONE,
    NOT_COORDINATOR,
    Context,
    Session,
    milliseconds,
)
from segment_app.kafka.groups import GroupError

__all__ = ["GroupRequests"]

log = logging.getLogger(__name__)


class GroupRequests:
    """The replies about consumer groups."""

    def __init__(self, context: Context) -> None:
        self.context = context

    # -- groups --------------------------------------------------------------------------------

    async def _group_allowed(self, session: Session, group: str) -> bool:
        """Whether ``session`` may use ``group`` (the caller answers GROUP_AUTHORIZATION_FAILED
        if not). A group this node does not coordinate is refused too: ``_not_here`` says so."""
        try:
            scope, name = topic_stream(group, self.context.settings.scope)
        except ValueError:
            scope, name = self.context.settings.scope, group
        return await self.context.may(session, scope, name, "reader-group", "READ_UPDATE")

    def _coordinator(self, key: str) -> dict[str, Any]:
        found = self.context.coordinator_of(key)
        if found is None:
            return {"key": key, "node_id": -1, "host": "", "port": -1,
                    "error_code": COORDINATOR_NOT_AVAILABLE,
                    "error_message": "the group's node is not known now; try again"}  # fmt: skip
        return {"key": key, "node_id": found["node_id"], "host": found["host"],
                "port": found["port"], "error_code": NONE, "error_message": None}  # fmt: skip

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
        if not self.context.coordinates(request.group_id):
            return _not_here(request)
        if not await self._group_allowed(session, request.group_id):
            return {**failed, "error_code": GROUP_AUTHORIZATION_FAILED}
        session_ms = milliseconds(request.session_timeout)
        rebalance_ms = (
            milliseconds(getattr(request, "rebalance_timeout", session_ms))
            if version >= 1
            else session_ms
        )
        try:
            joined = await self.context.groups.join(
                request.group_id, request.member_id, client_id=session.client_id,
                client_host=session.host,
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
        if not self.context.coordinates(request.group_id):
            return _not_here(request)
        if not await self._group_allowed(session, request.group_id):
            return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "assignment": b""}
        assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
        try:
            kind, protocol, assignment = await self.context.groups.sync(
                request.group_id, request.generation_id, request.member_id, assignments
            )
        except GroupError as exc:
            return {"throttle_time": 0, "error_code": exc.code, "assignment": b""}
        return {"throttle_time": 0, "error_code": NONE, "protocol_type": kind,
                "protocol_name": protocol, "assignment": assignment}  # fmt: skip

    async def heartbeat(self, request: Any, version: int, session: Session) -> Any:
        if not self.context.coordinates(request.group_id):
            return _not_here(request)
        if not await self._group_allowed(session, request.group_id):
            return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
        try:
            self.context.groups.heartbeat(
                request.group_id, request.generation_id, request.member_id
            )
        except GroupError as exc:
            return {"throttle_time": 0, "error_code": exc.code}
        return {"throttle_time": 0, "error_code": NONE}

    async def leave_group(self, request: Any, version: int, session: Session) -> Any:
        if not self.context.coordinates(request.group_id):
            return _not_here(request)
        if not await self._group_allowed(session, request.group_id):
            return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "members": []}
        members = [m.member_id for m in request.members] if version >= 3 else [request.member_id]
        codes = self.context.groups.leave(request.group_id, members)
        error = codes[members[0]] if version < 3 and members else NONE
        return {
            "throttle_time": 0, "error_code": error,
            "members": [{"member_id": m, "group_instance_id": None, "error_code": c}
                        for m, c in codes.items()],
        }  # fmt: skip

    async def offset_commit(self, request: Any, version: int, session: Session) -> Any:
        code = NONE
        if not self.context.coordinates(request.group_id):
            return _not_here(request)
        if not await self._group_allowed(session, request.group_id):
            code = GROUP_AUTHORIZATION_FAILED
        else:
            generation: int = getattr(
                request, "generation_id_or_member_epoch", getattr(request, "generation_id", -1)
            )
            try:
                self.context.groups.check_member(request.group_id, request.member_id, generation)
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
                await asyncio.to_thread(
                    self.context.catalog.commit_offsets, request.group_id, offsets
                )
            except CatalogError as exc:
                code = exc.code
        return {
            "throttle_time": 0,
            "topics": [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": code}
                for p in t.partitions]} for t in request.topics],
        }  # fmt: skip

    async def offset_fetch(self, request: Any, version: int, session: Session) -> Any:
        if not self.context.coordinates(request.group_id):
            return _not_here(request)
        if not await self._group_allowed(session, request.group_id):
            return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "topics": []}
        asked = None
        if request.topics is not None:
            asked = [(t.name, p) for t in request.topics for p in t.partition_indexes]
        stored = await asyncio.to_thread(
            self.context.catalog.committed_offsets, request.group_id, asked
        )
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
        for group_id in sorted(self.context.groups.groups):
            described = self.context.groups.describe(group_id)
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
            described = self.context.groups.describe(group_id) or {
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


def _not_here(request: Any) -> dict[str, Any]:
    """The answer of a node that does not coordinate the request's group (NOT_COORDINATOR, in
    every error field the reply has): the client finds the coordinator again."""
    topics = []
    for topic in getattr(request, "topics", None) or ():
        indexes = getattr(topic, "partition_indexes", None)
        if indexes is None:
            indexes = [p.partition_index for p in topic.partitions]
        topics.append({"name": topic.name, "partitions": [
            {"partition_index": i, "error_code": NOT_COORDINATOR, "committed_offset": -1}
            for i in indexes]})  # fmt: skip
    return {"throttle_time": 0, "error_code": NOT_COORDINATOR, "generation_id": -1,
            "member_id": getattr(request, "member_id", ""), "members": [], "assignment": b"",
            "topics": topics}  # fmt: skip
