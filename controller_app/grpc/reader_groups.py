"""The gRPC rpcs of reader groups: create, configuration, update, delete, subscribers, cuts."""

from __future__ import annotations

from typing import Any

from controller_app import selectors as sel
from controller_app.access import grants
from controller_app.errors import (
    InvalidArgumentError,
    InvalidStreamCutError,
    ReaderGroupNotFoundError,
    ScopeNotFoundError,
    StreamNotFoundError,
)
from controller_app.grpc import controller_pb2 as pb
from controller_app.grpc.common import (
    _RG_RETENTION,
    RpcArea,
    _cut,
    _names,
    _stream_info,
    _unimplemented,
    outcome,
    rpc,
)
from controller_app.models import (
    ReaderGroup,
)
from controller_app.segment_client import segment_store
from controller_app.workflows import (
    reader_groups,
)
from controller_app.workflows.common import get_stream
from controller_app.workflows.config import check_name


def _subscriber(request: pb.SubscriberStreamCut) -> str:
    """A subscriber's stream cut is the reader group's to move (READ_UPDATE on the group, not on
    the stream)."""
    scope, _, name = request.subscriber.rpartition("/")
    return grants.reader_group_resource(scope or request.streamCut.streamInfo.scope, name)


class ReaderGroups(RpcArea):
    """Reader groups, subscribers, key-value tables, the controllers."""

    # -- reader groups and subscribers ----------------------------------------------------

    @staticmethod
    def _group_config(request: pb.ReaderGroupConfiguration) -> reader_groups.ReaderGroupConfig:
        starts: dict[str, Any] = {}
        for cut in request.startingStreamCuts:
            scoped = "/".join(_names(cut.streamInfo))
            starts[scoped] = _cut(cut.cut) or "head"
        retention = _RG_RETENTION.get(request.retentionType)
        if retention is None:
            raise InvalidArgumentError(f"unknown retentionType {request.retentionType}")
        refresh = request.groupRefreshTimeMillis or reader_groups.GROUP_REFRESH_MS_DEFAULT
        return reader_groups.ReaderGroupConfig(
            streams=starts, retention_type=retention, group_refresh_time_ms=refresh
        )

    @staticmethod
    def _group_message(group: ReaderGroup) -> pb.ReaderGroupConfiguration:
        config = reader_groups.ReaderGroupConfig.from_json(group.configuration)
        retention = {v: k for k, v in _RG_RETENTION.items()}
        out = pb.ReaderGroupConfiguration(
            scope=group.scope.name, readerGroupName=group.name,
            groupRefreshTimeMillis=config.group_refresh_time_ms,
            retentionType=retention.get(config.retention_type, 0),
            generation=group.generation, readerGroupId=str(group.reader_group_id),
        )  # fmt: skip
        for scoped, start in sorted(config.streams.items()):
            scope, _, stream = scoped.partition("/")
            cut = pb.StreamCut(streamInfo=_stream_info(scope, stream))
            if not isinstance(start, str):
                cut.cut.update({int(k): int(v) for k, v in start.items()})
            out.startingStreamCuts.append(cut)
            out.endingStreamCuts.append(pb.StreamCut(streamInfo=_stream_info(scope, stream)))
        return out

    @rpc("operate")
    def createReaderGroup(
        self, request: pb.ReaderGroupConfiguration, user: Any
    ) -> pb.CreateReaderGroupResponse:
        status = pb.CreateReaderGroupResponse
        if not sel.scope_exists(request.scope):
            return status(status=status.SCOPE_NOT_FOUND)
        try:
            check_name("reader group", request.readerGroupName)
        except InvalidArgumentError:
            return status(status=status.INVALID_RG_NAME)
        config = self._group_config(request)
        grants.authorize_streams(user, config.streams)
        group = reader_groups.create_reader_group(
            segment_store(), request.scope, request.readerGroupName, config
        )
        return status(status=status.SUCCESS, config=self._group_message(group))

    @rpc("read")
    def getReaderGroupConfig(
        self, request: pb.ReaderGroupInfo, user: Any
    ) -> pb.ReaderGroupConfigResponse:
        status = pb.ReaderGroupConfigResponse
        try:
            group = reader_groups.get_reader_group(request.scope, request.readerGroup)
        except (ReaderGroupNotFoundError, ScopeNotFoundError):
            return status(status=status.RG_NOT_FOUND)
        return status(status=status.SUCCESS, config=self._group_message(group))

    @rpc("operate")
    def updateReaderGroup(
        self, request: pb.ReaderGroupConfiguration, user: Any
    ) -> pb.UpdateReaderGroupResponse:
        status = pb.UpdateReaderGroupResponse
        try:
            config = self._group_config(request)
        except InvalidArgumentError:
            return status(status=status.INVALID_CONFIG)
        grants.authorize_streams(user, config.streams)
        try:
            group = reader_groups.reset_reader_group(
                segment_store(), request.scope, request.readerGroupName, config
            )
        except (ReaderGroupNotFoundError, ScopeNotFoundError):
            return status(status=status.RG_NOT_FOUND)
        return status(status=status.SUCCESS, generation=group.generation)

    @rpc("operate")
    def deleteReaderGroup(
        self, request: pb.ReaderGroupInfo, user: Any
    ) -> pb.DeleteReaderGroupStatus:
        kind = pb.DeleteReaderGroupStatus
        return outcome(
            kind, lambda: reader_groups.delete_reader_group(request.scope, request.readerGroup),
            {ReaderGroupNotFoundError: kind.RG_NOT_FOUND, ScopeNotFoundError: kind.RG_NOT_FOUND},
        )  # fmt: skip

    @rpc("read")
    def listSubscribers(self, request: pb.StreamInfo, user: Any) -> pb.SubscribersResponse:
        status = pb.SubscribersResponse
        try:
            row = get_stream(*_names(request))
        except StreamNotFoundError:
            return status(status=status.STREAM_NOT_FOUND)
        groups = sel.reader_groups_reading(row)
        names = [
            f"{g.scope.name}/{g.name}"
            for g in groups
            if g.configuration.get("retentionType", "NONE") != "NONE"
        ]
        return status(status=status.SUCCESS, subscribers=names)

    @rpc("operate", resource=_subscriber)
    def updateSubscriberStreamCut(
        self, request: pb.SubscriberStreamCut, user: Any
    ) -> pb.UpdateSubscriberStatus:
        status = pb.UpdateSubscriberStatus
        try:
            scope, name = _names(request.streamCut.streamInfo)
            get_stream(scope, name)
        except StreamNotFoundError:
            return status(status=status.STREAM_NOT_FOUND)
        group_scope, _, group_name = request.subscriber.rpartition("/")
        group_scope = group_scope or scope
        try:
            group = reader_groups.get_reader_group(group_scope, group_name)
        except (ReaderGroupNotFoundError, ScopeNotFoundError):
            return status(status=status.SUBSCRIBER_NOT_FOUND)
        if request.generation and request.generation != group.generation:
            return status(status=status.GENERATION_MISMATCH)
        try:
            reader_groups.update_subscriber_cuts(
                group_scope, group_name, {f"{scope}/{name}": _cut(request.streamCut.cut)}
            )
        except (InvalidStreamCutError, InvalidArgumentError):
            return status(status=status.STREAM_CUT_NOT_VALID)
        return status(status=status.SUCCESS)

    # -- the controllers --------------------------------------------------------------------

    @rpc("read")
    def getControllerServerList(self, request: pb.ServerRequest, user: Any) -> pb.ServerResponse:
        """The live controllers' gRPC endpoints (this one alone outside a cluster)."""
        found = {self.address, *sel.live_controller_endpoints()}
        return pb.ServerResponse(
            nodeURI=[pb.NodeUri(endpoint=host, port=port) for host, port in sorted(found)]
        )

    getControllerToBucketMapping = _unimplemented(
        "getControllerToBucketMapping",
        "Millrace's retention and watermark buckets are taken by lease by whichever beat runs"
        " (see GET /v1/cluster), not mapped to controllers",
    )
