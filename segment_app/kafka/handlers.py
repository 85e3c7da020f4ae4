"""What the Kafka listener answers to each request it serves: the table of API keys.

Responsibility: put together the node's ``Context`` and the request modules (``admin_requests``,
``record_requests``, ``group_requests``), one coroutine per API key (``Handlers.table``).
Each takes the decoded request, its version and the connection's ``Session`` and gives the
reply's values (plain mappings; ``codec.build`` makes the reply of the version asked), or None
for no reply (a produce with acks=0).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from millrace.kernel.kafka_topics import KafkaCatalog
from segment_app.kafka.admin_requests import AdminRequests
from segment_app.kafka.context import Context, KafkaSettings, Session
from segment_app.kafka.group_requests import GroupRequests
from segment_app.kafka.groups import GroupCoordinator
from segment_app.kafka.partitions import Partitions
from segment_app.kafka.record_requests import RecordRequests

__all__ = ["Handlers"]

Handler = Callable[[Any, int, Session], Awaitable[Any]]


class Handlers:
    """The replies of one node's Kafka listener, by API key."""

    def __init__(
        self, settings: KafkaSettings, partitions: Partitions, groups: GroupCoordinator,
        catalog: KafkaCatalog,
    ) -> None:  # fmt: skip
        self.context = Context(settings, partitions, groups, catalog)
        admin = AdminRequests(self.context)
        records = RecordRequests(self.context)
        group = GroupRequests(self.context)
        self.table: dict[int, Handler] = {
            0: records.produce, 1: records.fetch, 2: records.list_offsets, 3: admin.metadata,
            8: group.offset_commit, 9: group.offset_fetch, 10: group.find_coordinator,
            11: group.join_group, 12: group.heartbeat, 13: group.leave_group,
            14: group.sync_group, 15: group.describe_groups, 16: group.list_groups,
            17: admin.sasl_handshake, 18: admin.api_versions, 19: admin.create_topics,
            20: admin.delete_topics, 21: records.delete_records, 22: records.init_producer_id,
            32: admin.describe_configs, 36: admin.sasl_authenticate, 60: admin.describe_cluster,
        }  # fmt: skip

    async def authenticate_plain(self, token: bytes) -> str | None:
        return await self.context.authenticate_plain(token)
