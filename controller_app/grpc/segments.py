"""The gRPC rpcs of segments: current, by epoch, successors, predecessors, URIs, scaling,
truncation."""

from __future__ import annotations

from typing import Any

from controller_app import selectors as sel
from controller_app.choices import (
    StreamState,
)
from controller_app.errors import (
    ConflictError,
    InvalidArgumentError,
    InvalidStreamCutError,
    PreconditionFailedError,
    ScopeNotFoundError,
)
from controller_app.grpc import controller_pb2 as pb
from controller_app.grpc.common import (
    RpcArea,
    _cut,
    _names,
    _ranges,
    _stream_info,
    log,
    rpc,
)
from controller_app.workflows import (
    scale,
)
from controller_app.workflows.common import get_stream
from millrace.kernel import defaults
from millrace.kernel.kvt import KVTABLE_SUFFIX
from millrace.kernel.naming import qualified_segment_name


class Segments(RpcArea):
    """Segments, the node serving them, their tokens, and scaling."""

    # -- segments -------------------------------------------------------------------------

    @rpc("read")
    def getCurrentSegments(self, request: pb.StreamInfo, user: Any) -> pb.SegmentRanges:
        row = get_stream(*_names(request))
        segments = () if row.state == StreamState.SEALED else sel.current_segments(row)
        return pb.SegmentRanges(
            segmentRanges=_ranges(row, segments),
            delegationToken=self._token(user, row.scope.name, row.name),
        )

    @rpc("read")
    def getEpochSegments(self, request: pb.GetEpochSegmentsRequest, user: Any) -> pb.SegmentRanges:
        row = get_stream(*_names(request.streamInfo))
        if not 0 <= request.epoch <= row.current_epoch:
            raise InvalidArgumentError(
                f"epoch {request.epoch} is not one of {row}'s (0 to {row.current_epoch})"
            )
        segments = sel.epoch_record(row, request.epoch).segment_list()
        return pb.SegmentRanges(
            segmentRanges=_ranges(row, segments),
            delegationToken=self._token(user, row.scope.name, row.name),
        )

    @rpc("read")
    def getSegments(self, request: pb.GetSegmentsRequest, user: Any) -> pb.SegmentsAtTime:
        row = get_stream(*_names(request.streamInfo))
        found = (
            sel.head_segments(row) if request.timestamp <= 0
            else sel.segments_at_time(row, request.timestamp)
        )  # fmt: skip
        info = _stream_info(row.scope.name, row.name)
        return pb.SegmentsAtTime(
            segments=[
                pb.SegmentsAtTime.SegmentLocation(
                    segmentId=pb.SegmentId(streamInfo=info, segmentId=g.id), offset=offset
                )
                for g, offset in sorted(found.items(), key=lambda kv: kv[0].key_start)
            ],
            delegationToken=self._token(user, row.scope.name, row.name),
        )

    @rpc("read")
    def getSegmentsImmediatelyFollowing(
        self, request: pb.SegmentId, user: Any
    ) -> pb.SuccessorResponse:
        row = get_stream(*_names(request.streamInfo))
        sel.segment_record(row, request.segmentId)
        found = sel.successors(row, request.segmentId)
        ranges = {r.segmentId.segmentId: r for r in _ranges(row, found)}
        return pb.SuccessorResponse(
            segments=[
                pb.SuccessorResponse.SegmentEntry(segment=ranges[g.id], value=predecessors)
                for g, predecessors in sorted(found.items(), key=lambda kv: kv[0].key_start)
            ],
            delegationToken=self._token(user, row.scope.name, row.name),
        )

    getSegmentsImmediatlyFollowing = getSegmentsImmediatelyFollowing  # (Pravega's old spelling)

    @rpc("read")
    def getSegmentsBetween(
        self, request: pb.StreamCutRange, user: Any
    ) -> pb.StreamCutRangeResponse:
        row = get_stream(*_names(request.streamInfo))
        found = sel.segments_between(
            row, _cut(getattr(request, "from")) or None, _cut(request.to) or None
        )
        info = _stream_info(row.scope.name, row.name)
        return pb.StreamCutRangeResponse(
            segments=[pb.SegmentId(streamInfo=info, segmentId=g.id) for g in found],
            delegationToken=self._token(user, row.scope.name, row.name),
        )

    @rpc("read")
    def isSegmentValid(self, request: pb.SegmentId, user: Any) -> pb.SegmentValidityResponse:
        """Whether the segment is one of the stream's current (open) segments, as Pravega."""
        row = sel.stream_named(request.streamInfo.scope, request.streamInfo.stream)
        if row is None or row.state == StreamState.SEALED:
            return pb.SegmentValidityResponse(response=False)
        current = {g.id for g in sel.current_segments(row)}
        return pb.SegmentValidityResponse(response=request.segmentId in current)

    @rpc("read")
    def isStreamCutValid(self, request: pb.StreamCut, user: Any) -> pb.StreamCutValidityResponse:
        row = get_stream(*_names(request.streamInfo))
        try:
            sel.validate_stream_cut(row, _cut(request.cut))
        except InvalidStreamCutError:
            return pb.StreamCutValidityResponse(response=False)
        return pb.StreamCutValidityResponse(response=True)

    @rpc("read")
    def getURI(self, request: pb.SegmentId, user: Any) -> pb.NodeUri:
        """The node serving the segment (any segment of the stream, its transaction segments,
        and ``<name>_kvtable`` table segments), whether or not it exists, as Pravega answers."""
        scope, stream = _names(request.streamInfo)
        if request.segmentId < 0:
            raise InvalidArgumentError(f"segment id {request.segmentId} is negative")
        try:
            name = qualified_segment_name(scope, stream, request.segmentId)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
        uri = sel.node_uri(name)
        return pb.NodeUri(endpoint=uri.host, port=uri.port)

    @rpc("read")
    def getDelegationToken(self, request: pb.StreamInfo, user: Any) -> pb.DelegationToken:
        scope, stream = _names(request)
        if not stream.endswith(KVTABLE_SUFFIX):
            get_stream(scope, stream)
        elif not sel.scope_exists(scope):
            raise ScopeNotFoundError(f"scope {scope} does not exist")
        return pb.DelegationToken(delegationToken=self._token(user, scope, stream))

    # -- scaling --------------------------------------------------------------------------

    @rpc("operate")
    def scale(self, request: pb.ScaleRequest, user: Any) -> pb.ScaleResponse:
        scope, name = _names(request.streamInfo)
        ranges = [(r.start, r.end) for r in request.newKeyRanges]
        try:
            scale.scale_stream(
                scope, name, list(request.sealedSegments), ranges,
                scale_time=request.scaleTimestamp or None, wait=defaults.WORKFLOW_WAIT_SECONDS,
            )  # fmt: skip
        except (PreconditionFailedError, ConflictError, InvalidArgumentError) as exc:
            log.info("scale of %s/%s refused: %s", scope, name, exc)
            return pb.ScaleResponse(status=pb.ScaleResponse.PRECONDITION_FAILED)
        row = get_stream(scope, name)
        return pb.ScaleResponse(
            status=pb.ScaleResponse.STARTED, epoch=row.current_epoch,
            segments=_ranges(row, sel.current_segments(row)),
        )  # fmt: skip

    @rpc("read")
    def checkScale(self, request: pb.ScaleStatusRequest, user: Any) -> pb.ScaleStatusResponse:
        status = pb.ScaleStatusResponse
        row = get_stream(*_names(request.streamInfo))
        if request.epoch < 0 or request.epoch > row.current_epoch + 1:
            return status(status=status.INVALID_INPUT)
        done = request.epoch <= row.current_epoch and row.state != StreamState.SCALING
        return status(status=status.SUCCESS if done else status.IN_PROGRESS)
