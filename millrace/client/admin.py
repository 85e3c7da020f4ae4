"""Managing a node through its REST API: one method a call, as the command line makes them.

Responsibility: ``AdminCalls`` names each call the ``millrace`` commands (and the Spark bridge's
schema calls) make of a controller: scopes and their quotas, streams, their segments, schema
bindings, scaling and truncation, reader groups and their checkpoints, key-value tables and
their entries, the cluster, the schema registry. Each method answers the REST API's JSON as it
is (the commands print it with ``--json``) and raises ``ControllerError`` as the API answers;
the paths are ``millrace.kernel.rest_paths``'. It rides on an ``AsyncControllerClient`` (its
retries, its controllers, its TLS); the writers, readers and tables keep their own calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from millrace.client.controller import AsyncControllerClient
from millrace.kernel import rest_paths as paths

__all__ = ["AdminCalls"]


class AdminCalls:
    """The management calls of one controller client (``AsyncControllerClient``)."""

    def __init__(self, controller: AsyncControllerClient) -> None:
        self.controller = controller

    async def _get(self, path: str, *, api: str = "/v1") -> Any:
        return await self.controller.call("GET", path, api=api)

    # -- the cluster, scopes and quotas ----------------------------------------------------------

    async def cluster(self) -> Any:
        return await self._get(paths.cluster())

    async def kafka_groups(self) -> Any:
        return await self._get(paths.kafka_groups())

    async def list_scopes(self) -> Any:
        return await self._get(paths.scopes())

    async def create_scope(self, name: str) -> Any:
        return await self.controller.call("POST", paths.scopes(), {"scopeName": name})

    async def delete_scope(self, name: str) -> Any:
        return await self.controller.call("DELETE", paths.scope(name))

    async def scope_quota(self, name: str, change: dict[str, Any] | None = None) -> Any:
        """The scope's quota and its use; with ``change``, those limits set first."""
        if change:
            return await self.controller.call("PUT", paths.scope_quota(name), change)
        return await self._get(paths.scope_quota(name))

    # -- streams -------------------------------------------------------------------------------

    async def create_stream(self, scope: str, body: dict[str, Any]) -> Any:
        return await self.controller.call("POST", paths.streams(scope), body)

    async def list_streams(self, scope: str) -> Any:
        return await self._get(paths.streams(scope))

    async def stream_info(self, scope: str, stream: str) -> Any:
        return await self._get(paths.stream_info(scope, stream))

    async def segments(self, scope: str, stream: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await self._get(paths.segments(scope, stream)))["segments"]
        return found

    async def stream_schema(
        self, scope: str, stream: str, change: dict[str, Any] | None = None
    ) -> Any:
        """The stream's schema binding; with ``change``, set first."""
        if change:
            return await self.controller.call("PUT", paths.stream_schema(scope, stream), change)
        return await self._get(paths.stream_schema(scope, stream))

    async def seal_stream(self, scope: str, stream: str) -> Any:
        body = {"streamState": "SEALED"}
        return await self.controller.call("PUT", paths.stream_state(scope, stream), body)

    async def delete_stream(self, scope: str, stream: str) -> Any:
        return await self.controller.call("DELETE", paths.stream(scope, stream))

    async def scale_stream(
        self, scope: str, stream: str, sealed: list[int], ranges: list[list[float]]
    ) -> Any:
        body = {"sealedSegments": sealed, "newRanges": ranges}
        return await self.controller.call("POST", paths.stream_scale(scope, stream), body)

    async def truncate_stream(self, scope: str, stream: str, cut: dict[str, int]) -> Any:
        body = {"streamCut": cut}
        return await self.controller.call("POST", paths.stream_truncate(scope, stream), body)

    # -- reader groups -------------------------------------------------------------------------

    async def create_reader_group(self, scope: str, body: dict[str, Any]) -> Any:
        return await self.controller.call("POST", paths.reader_groups(scope), body)

    async def list_reader_groups(self, scope: str) -> Any:
        return await self._get(paths.reader_groups(scope))

    async def reader_group(self, scope: str, name: str) -> Any:
        return await self._get(paths.reader_group(scope, name))

    async def reader_group_lag(self, scope: str, name: str) -> Any:
        return await self._get(paths.reader_group_lag(scope, name))

    async def delete_reader_group(self, scope: str, name: str) -> Any:
        return await self.controller.call("DELETE", paths.reader_group(scope, name))

    async def start_checkpoint(self, scope: str, name: str, checkpoint: str) -> Any:
        body = {"checkpointName": checkpoint}
        return await self.controller.call("POST", paths.reader_group_checkpoints(scope, name), body)

    async def checkpoint(self, scope: str, name: str, checkpoint: str) -> Any:
        return await self._get(paths.reader_group_checkpoint(scope, name, checkpoint))

    async def reset_reader_group(self, scope: str, name: str, body: dict[str, Any]) -> Any:
        return await self.controller.call("POST", paths.reader_group_reset(scope, name), body)

    # -- key-value tables ----------------------------------------------------------------------

    async def create_kvt(self, scope: str, body: dict[str, Any]) -> Any:
        return await self.controller.call("POST", paths.kvtables(scope), body)

    async def list_kvts(self, scope: str) -> Any:
        return await self._get(paths.kvtables(scope))

    async def kvt(self, scope: str, name: str) -> Any:
        return await self._get(paths.kvtable(scope, name))

    async def delete_kvt(self, scope: str, name: str) -> Any:
        return await self.controller.call("DELETE", paths.kvtable(scope, name))

    async def entries(self, scope: str, name: str, query: Mapping[str, object]) -> Any:
        return await self._get(paths.kvtable_entries(scope, name, query))

    async def entry(
        self, scope: str, name: str, key: str, *, base64: bool = False,
        method: str = "GET", body: Any = None, headers: dict[str, str] | None = None,
    ) -> Any:  # fmt: skip
        """``GET`` (or ``method``: ``PUT`` with a body, ``DELETE``) the entry of ``key``
        (``base64``: the key is base64 text); ``headers``: ``If-Match`` and the like."""
        query = {"keyEncoding": "base64" if base64 else None}
        path = paths.kvtable_entry(scope, name, key, query)
        return await self.controller.call(method, path, body, headers=headers)

    # -- the schema registry -------------------------------------------------------------------

    async def register_schema(self, subject: str, body: dict[str, Any]) -> Any:
        return await self._registry("POST", paths.registry_versions(subject), body)

    async def subjects(self, query: Mapping[str, object]) -> Any:
        return await self._get(paths.registry_subjects(query), api=paths.REGISTRY)

    async def schema_by_id(self, schema_id: object) -> Any:
        return await self._get(paths.registry_schema(schema_id), api=paths.REGISTRY)

    async def schema_version(self, subject: str, version: object) -> Any:
        return await self._get(paths.registry_version(subject, version), api=paths.REGISTRY)

    async def check_compatibility(
        self, subject: str, version: object | None, body: dict[str, Any]
    ) -> Any:
        return await self._registry("POST", paths.registry_compatibility(subject, version), body)

    async def delete_subject(
        self, subject: str, version: object | None = None, *, permanent: bool = False
    ) -> Any:
        query = {"permanent": "true" if permanent else None}
        if version is None:
            return await self._registry("DELETE", paths.registry_subject(subject, query))
        return await self._registry("DELETE", paths.registry_version(subject, version, query))

    async def compatibility_level(
        self, subject: str | None = None, level: str | None = None
    ) -> Any:
        """The compatibility level of ``subject`` (or the global one); with ``level``, set."""
        if level:
            return await self._registry(
                "PUT", paths.registry_config(subject), {"compatibility": level}
            )
        query = {"defaultToGlobal": "true" if subject else None}
        return await self._get(paths.registry_config(subject, query), api=paths.REGISTRY)

    async def _registry(self, method: str, path: str, body: Any = None) -> Any:
        return await self.controller.call(method, path, body, api=paths.REGISTRY)
