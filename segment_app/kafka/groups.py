"""Kafka's classic consumer group protocol: join, sync, heartbeat and leave, as a coordinator.

Responsibility: the live state of the groups this node coordinates (members, generation,
leader, chosen protocol, assignments) and the rebalances between them. The assignment itself is
the client's (its leader runs the assignor: range, round-robin, sticky, cooperative-sticky);
the coordinator only carries it. Committed offsets are not kept here: the listener stores them
through the catalog (durable in the metadata database).

A rebalance starts when a member joins, leaves, or is silent for its session timeout; it ends
when every member has joined again, or after the longest rebalance timeout, without those that
did not. A new group waits ``INITIAL_DELAY_S`` for its first members, as Kafka's
``group.initial.rebalance.delay.ms`` does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import Any

__all__ = ["GroupCoordinator", "GroupError", "JoinResult"]

#: A new group's first rebalance waits this long for more members (Kafka: 3 s).
INITIAL_DELAY_S = 0.5

UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
REBALANCE_IN_PROGRESS = 27
INCONSISTENT_GROUP_PROTOCOL = 23
COORDINATOR_NOT_AVAILABLE = 15
INVALID_SESSION_TIMEOUT = 26


class GroupError(Exception):
    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or f"Kafka error {code}")
        self.code = code


@dataclasses.dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_s: float
    rebalance_timeout_s: float
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    group_instance_id: str | None = None
    last_seen: float = dataclasses.field(default_factory=time.monotonic)
    assignment: bytes = b""
    joining: asyncio.Future[JoinResult] | None = None
    syncing: asyncio.Future[bytes] | None = None


@dataclasses.dataclass(frozen=True)
class JoinResult:
    generation: int
    protocol_type: str
    protocol: str
    leader: str
    member_id: str
    #: (member id, group instance id, metadata): the leader's alone.
    members: list[tuple[str, str | None, bytes]]


@dataclasses.dataclass
class Group:
    group_id: str
    state: str = "Empty"  # Empty, PreparingRebalance, CompletingRebalance, Stable
    generation: int = 0
    protocol_type: str = ""
    protocol: str = ""
    leader: str = ""
    members: dict[str, Member] = dataclasses.field(default_factory=dict)
    rebalance: asyncio.TimerHandle | None = None


class GroupCoordinator:
    """The groups of this node; ``start`` runs the watch for silent members."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self._watch: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._watch = asyncio.create_task(self._expire_silent())

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        for group in self.groups.values():
            for member in group.members.values():
                for waiting in (member.joining, member.syncing):
                    if waiting is not None and not waiting.done():
                        waiting.set_exception(GroupError(COORDINATOR_NOT_AVAILABLE))

    def group(self, group_id: str) -> Group:
        found = self.groups.get(group_id)
        if found is None:
            found = self.groups[group_id] = Group(group_id)
        return found

    # -- join -------------------------------------------------------------------------------------

    async def join(
        self, group_id: str, member_id: str, *, client_id: str, client_host: str,
        session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
        protocols: list[tuple[str, bytes]], group_instance_id: str | None = None,
    ) -> JoinResult:  # fmt: skip
        if not 1_000 <= session_timeout_ms <= 1_800_000:
            raise GroupError(INVALID_SESSION_TIMEOUT, "session timeout outside 1 s - 30 min")
        group = self.group(group_id)
        if group.members and protocol_type != group.protocol_type:
            raise GroupError(INCONSISTENT_GROUP_PROTOCOL, "another protocol type")
        names = {name for name, _ in protocols}
        for other in group.members.values():
            if other.member_id != member_id and not names & {n for n, _ in other.protocols}:
                raise GroupError(INCONSISTENT_GROUP_PROTOCOL, "no protocol in common")
        if member_id and member_id not in group.members:
            raise GroupError(UNKNOWN_MEMBER_ID, f"no member {member_id} in {group_id}")
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = Member(
                member_id, client_id, client_host, session_timeout_ms / 1000,
                rebalance_timeout_ms / 1000, protocol_type, protocols, group_instance_id,
            )  # fmt: skip
        else:
            member.protocols, member.last_seen = protocols, time.monotonic()
            member.session_timeout_s = session_timeout_ms / 1000
            member.rebalance_timeout_s = rebalance_timeout_ms / 1000
        group.protocol_type = protocol_type
        if member.joining is not None and not member.joining.done():
            member.joining.cancel()
        member.joining = asyncio.get_running_loop().create_future()
        waiting = member.joining
        self._prepare(group, initial=group.state == "Empty")
        self._complete_join_if_all(group)
        return await waiting

    def _prepare(self, group: Group, initial: bool = False) -> None:
        """Start a rebalance (when none is under way)."""
        for member in group.members.values():
            if member.syncing is not None and not member.syncing.done():
                member.syncing.set_exception(GroupError(REBALANCE_IN_PROGRESS))
        if group.state == "PreparingRebalance":
            return
        group.state = "PreparingRebalance"
        limit = max((m.rebalance_timeout_s for m in group.members.values()), default=1.0)
        delay = min(INITIAL_DELAY_S, limit) if initial else limit
        loop = asyncio.get_running_loop()
        group.rebalance = loop.call_later(delay, self._rebalance_due, group, initial)

    def _rebalance_due(self, group: Group, initial: bool) -> None:
        group.rebalance = None
        if initial and not all(m.joining is not None for m in group.members.values()):
            limit = max((m.rebalance_timeout_s for m in group.members.values()), default=1.0)
            loop = asyncio.get_running_loop()
            group.rebalance = loop.call_later(limit, self._rebalance_due, group, False)
            return
        for member_id in [m for m, v in group.members.items() if v.joining is None]:
            del group.members[member_id]  # (did not join in time)
        self._complete_join(group)

    def _complete_join_if_all(self, group: Group) -> None:
        if group.state != "PreparingRebalance" or not group.members:
            return
        if group.rebalance is not None and group.generation == 0 and group.leader == "":
            # (a new group: its first rebalance waits the initial delay for more members)
            return
        if all(m.joining is not None and not m.joining.done() for m in group.members.values()):
            if group.rebalance is not None:
                group.rebalance.cancel()
                group.rebalance = None
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if not group.members:
            group.state, group.leader, group.protocol = "Empty", "", ""
            group.generation += 1
            return
        group.generation += 1
        members = list(group.members.values())
        if group.leader not in group.members:
            group.leader = members[0].member_id
        leader = group.members[group.leader]
        common = set.intersection(*({n for n, _ in m.protocols} for m in members))
        group.protocol = next(name for name, _ in leader.protocols if name in common)
        metadata = [
            (m.member_id, m.group_instance_id, dict(m.protocols)[group.protocol]) for m in members
        ]
        group.state = "CompletingRebalance"
        for member in members:
            result = JoinResult(
                group.generation, group.protocol_type, group.protocol, group.leader,
                member.member_id, metadata if member.member_id == group.leader else [],
            )  # fmt: skip
            if member.joining is not None and not member.joining.done():
                member.joining.set_result(result)
            member.joining = None
            member.last_seen = time.monotonic()

    # -- sync, heartbeat, leave --------------------------------------------------------------

    async def sync(
        self, group_id: str, generation: int, member_id: str, assignments: dict[str, bytes]
    ) -> tuple[str, str, bytes]:
        """(protocol type, protocol, this member's assignment)."""
        group = self._member_of(group_id, member_id, generation)
        member = group.members[member_id]
        member.last_seen = time.monotonic()
        if group.state == "PreparingRebalance":
            raise GroupError(REBALANCE_IN_PROGRESS)
        if group.state == "Stable":
            return group.protocol_type, group.protocol, member.assignment
        if member_id == group.leader:
            for other in group.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            group.state = "Stable"
            for other in group.members.values():
                if other.syncing is not None and not other.syncing.done():
                    other.syncing.set_result(other.assignment)
                other.syncing = None
            return group.protocol_type, group.protocol, member.assignment
        member.syncing = asyncio.get_running_loop().create_future()
        assignment = await member.syncing
        return group.protocol_type, group.protocol, assignment

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> None:
        group = self._member_of(group_id, member_id, generation)
        group.members[member_id].last_seen = time.monotonic()
        if group.state == "PreparingRebalance":
            raise GroupError(REBALANCE_IN_PROGRESS)

    def leave(self, group_id: str, member_ids: list[str]) -> dict[str, int]:
        """Each member's error code (0: it left)."""
        group = self.groups.get(group_id)
        codes: dict[str, int] = {}
        for member_id in member_ids:
            if group is None or member_id not in group.members:
                codes[member_id] = UNKNOWN_MEMBER_ID
                continue
            self._remove(group, member_id)
            codes[member_id] = 0
        return codes

    def check_member(self, group_id: str, member_id: str, generation: int) -> None:
        """For a commit: ``GroupError`` unless the member is of that generation (-1: any
        client that is not a member, as a standalone consumer commits)."""
        if generation < 0 and not member_id:
            return
        self._member_of(group_id, member_id, generation)

    def _member_of(self, group_id: str, member_id: str, generation: int) -> Group:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            raise GroupError(UNKNOWN_MEMBER_ID, f"no member {member_id} in {group_id}")
        if generation != group.generation:
            raise GroupError(
                ILLEGAL_GENERATION, f"generation {generation} is not {group.generation}"
            )
        return group

    def _remove(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        for waiting in (member.joining, member.syncing):
            if waiting is not None and not waiting.done():
                waiting.set_exception(GroupError(UNKNOWN_MEMBER_ID))
        if group.leader == member_id:
            group.leader = ""
        if group.members:
            self._prepare(group)
            self._complete_join_if_all(group)
        else:
            if group.rebalance is not None:
                group.rebalance.cancel()
                group.rebalance = None
            self._complete_join(group)

    async def _expire_silent(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            for group in list(self.groups.values()):
                for member in list(group.members.values()):
                    waiting = member.joining is not None and not member.joining.done()
                    if not waiting and now - member.last_seen > member.session_timeout_s:
                        self._remove(group, member.member_id)

    # -- describing --------------------------------------------------------------------------------

    def describe(self, group_id: str) -> dict[str, Any] | None:
        group = self.groups.get(group_id)
        if group is None:
            return None
        return {
            "state": group.state if group.members else "Empty",
            "protocol_type": group.protocol_type,
            "protocol": group.protocol,
            "generation": group.generation,
            "leader": group.leader,
            "members": [
                {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                 "group_instance_id": m.group_instance_id,
                 "metadata": dict(m.protocols).get(group.protocol, b""),
                 "assignment": m.assignment}
                for m in group.members.values()
            ],
        }  # fmt: skip
