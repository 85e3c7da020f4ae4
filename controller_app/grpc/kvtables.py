"""The gRPC rpcs of key-value tables: create, list, configuration, partitions, delete."""

from __future__ import annotations

from typing import Any

from controller_app import selectors as sel
from controller_app.access import grants
from controller_app.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    KvtNotFoundError,
    PreconditionFailedError,
    ScopeNotFoundError,
)
from controller_app.grpc import controller_pb2 as pb
from controller_app.grpc.common import (
    PAGE_SIZE,
    RpcArea,
    _page,
    _scoped,
    _stream_info,
    created_in_scope,
    outcome,
    rpc,
)
from controller_app.segment_client import segment_store
from controller_app.workflows import (
    kvtables,
)
from millrace.kernel.kvt import KVTABLE_SUFFIX, KvtConfig, partition_ends
from millrace.kernel.naming import segment_id


class KeyValueTables(RpcArea):
    """Key-value tables (``controller_app.workflows.kvtables``)."""

    @rpc("operate", grants.MANAGE, resource=created_in_scope)
    def createKeyValueTable(
        self, request: pb.KeyValueTableConfig, user: Any
    ) -> pb.CreateKeyValueTableStatus:
        kind = pb.CreateKeyValueTableStatus
        config = KvtConfig(
            request.partitionCount, request.primaryKeyLength, request.secondaryKeyLength
        )
        return outcome(kind, lambda: kvtables.create_kvtable(
            segment_store(), request.scope, request.kvtName, config
        ), {
            AlreadyExistsError: kind.TABLE_EXISTS, ScopeNotFoundError: kind.SCOPE_NOT_FOUND,
            InvalidArgumentError: kind.INVALID_TABLE_NAME,
        })  # fmt: skip

    @rpc("read")
    def getCurrentSegmentsKeyValueTable(
        self, request: pb.KeyValueTableInfo, user: Any
    ) -> pb.SegmentRanges:
        """The table's partitions, one key range each (``1/n`` of the key space, divided as
        Pravega's controller does: ``millrace.kernel.kvt.partition_ends``)."""
        row = kvtables.active_kvtable(*_kvt_names(request))
        if row.placement != "pravega":  # Pravega's client would place keys elsewhere
            raise PreconditionFailedError(
                f"key-value table {row.scoped_name} places keys as Millrace did before "
                f"Pravega's placement ({row.placement}): only Millrace's clients may use it"
            )
        info = _stream_info(row.scope.name, row.name)
        ends = partition_ends(row.partitions)
        ranges = [
            pb.SegmentRange(
                segmentId=pb.SegmentId(streamInfo=info, segmentId=segment_id(0, n)),
                minKey=ends[n - 1] if n else 0.0, maxKey=end,
            )
            for n, end in enumerate(ends)
        ]  # fmt: skip
        token = self._token(user, row.scope.name, row.name + KVTABLE_SUFFIX)
        return pb.SegmentRanges(segmentRanges=ranges, delegationToken=token)

    @rpc("read", listing=True)
    def listKeyValueTablesInScope(
        self, request: pb.KVTablesInScopeRequest, user: Any
    ) -> pb.KVTablesInScopeResponse:
        kind = pb.KVTablesInScopeResponse
        scope = sel.scope_named(request.scope.scope)
        if scope is None:
            return kind(status=kind.SCOPE_NOT_FOUND)
        after = request.continuationToken.token
        found, token = _page(after, sel.kvtable_names(scope, after)[:PAGE_SIZE])
        found = grants.visible(user, found, lambda name: grants.kvtable_resource(scope.name, name))
        return kind(
            kvtables=[pb.KeyValueTableInfo(scope=scope.name, kvtName=n) for n in found],
            continuationToken=pb.ContinuationToken(token=token), status=kind.SUCCESS,
        )  # fmt: skip

    @rpc("read")
    def getKeyValueTableConfiguration(
        self, request: pb.KeyValueTableInfo, user: Any
    ) -> pb.KeyValueTableConfigResponse:
        kind = pb.KeyValueTableConfigResponse
        try:
            row = kvtables.get_kvtable(*_kvt_names(request))
        except (KvtNotFoundError, ScopeNotFoundError):
            return kind(status=kind.TABLE_NOT_FOUND)
        config = pb.KeyValueTableConfig(
            scope=row.scope.name, kvtName=row.name, partitionCount=row.partitions,
            primaryKeyLength=row.primary_key_length, secondaryKeyLength=row.secondary_key_length,
        )  # fmt: skip
        return kind(config=config, status=kind.SUCCESS)

    @rpc("operate", grants.MANAGE)
    def deleteKeyValueTable(
        self, request: pb.KeyValueTableInfo, user: Any
    ) -> pb.DeleteKVTableStatus:
        kind = pb.DeleteKVTableStatus
        scope, name = _kvt_names(request)
        return outcome(kind, lambda: kvtables.delete_kvtable(segment_store(), scope, name), {
            KvtNotFoundError: kind.TABLE_NOT_FOUND, ScopeNotFoundError: kind.TABLE_NOT_FOUND,
        })  # fmt: skip


def _kvt_names(info: pb.KeyValueTableInfo) -> tuple[str, str]:
    return _scoped("key-value table", info.scope, info.kvtName)
