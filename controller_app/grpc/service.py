"""Pravega's Client-Controller API over gRPC: ``ControllerService`` for Pravega's own clients.

Responsibility: each rpc authenticates the caller (Pravega's ``authorization`` metadata:
``Basic <base64 user:password>``, ``Basic <API token>`` or ``Bearer <API token>``), checks the
role the REST API would ask for the same thing, and calls the same workflow or selector as the
REST view (no rule lives here). Answers follow Pravega's controller:

* outcomes the proto has a status for (a scope that exists, a stream not found, a transaction
  not found ...) are that status, since Pravega's clients read them;
* other errors are gRPC status codes, each the one ``controller_app.outcomes`` gives it (the
  table REST reads too): INVALID_ARGUMENT (bad input), NOT_FOUND, ALREADY_EXISTS,
  FAILED_PRECONDITION, UNAVAILABLE for a metadata database, broker, segment store or
  container node that is away (clients retry it), DEADLINE_EXCEEDED for a workflow that
  outlasts the wait; UNAUTHENTICATED and PERMISSION_DENIED; INTERNAL for an error with no row
  (a bug: logged, never its text);
* rpcs Millrace does not serve answer UNIMPLEMENTED with a message (Pravega's clients do not
  retry it).

The rpcs run their Django work in threads (``asyncio.to_thread``) off the aio server's loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import grpc
from django.conf import settings
from django.contrib.auth import authenticate
from django.db import close_old_connections
from django.http import HttpRequest

from controller_app import selectors as sel
from controller_app.choices import (
    NodeRole,
    RetentionPolicyType,
    ScalingPolicyType,
    SessionState,
    StreamState,
)
from controller_app.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidArgumentError,
    InvalidStreamCutError,
    KvtNotFoundError,
    NotFoundError,
    PreconditionFailedError,
    ReaderGroupNotFoundError,
    ScopeNotFoundError,
    StreamNotFoundError,
    TransactionNotFoundError,
)
from controller_app.grpc import controller_pb2 as pb
from controller_app.grpc import controller_pb2_grpc as pb_grpc
from controller_app.models import (
    CompletedTransaction,
    KeyValueTable,
    Node,
    ReaderGroup,
    Scope,
    Stream,
)
from controller_app.outages import service_down
from controller_app.outcomes import outcome_of
from controller_app.roles import Need, may, refusal
from controller_app.segment_client import segment_store
from controller_app.segments import Segment
from controller_app.tokens import TokenExpiredError, stream_token_for, user_of
from controller_app.workflows import (
    kvtables,
    marks,
    reader_groups,
    scale,
    scopes,
    streams,
    transactions,
)
from controller_app.workflows import truncate as truncation
from controller_app.workflows.common import FACE_WAIT_SECONDS, get_stream
from controller_app.workflows.config import NAME_LENGTH_MAX, StreamConfig, check_name
from millrace.kernel.kvt import KVTABLE_SUFFIX, KvtConfig, partition_ends
from millrace.kernel.naming import qualified_segment_name, segment_id

__all__ = ["PAGE_SIZE", "ControllerService"]

log = logging.getLogger(__name__)

#: Scopes or streams per page of a listing.
PAGE_SIZE = 1000
#: How long an rpc that starts a workflow (update, seal, delete, scale, truncate) waits for it.
_NO_TIMESTAMP = -(2**63)

_R = TypeVar("_R")

_SCALING = {
    pb.ScalingPolicy.FIXED_NUM_SEGMENTS: ScalingPolicyType.FIXED_NUM_SEGMENTS,
    pb.ScalingPolicy.BY_RATE_IN_KBYTES_PER_SEC: ScalingPolicyType.BY_RATE_IN_KBYTES_PER_SEC,
    pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC: ScalingPolicyType.BY_RATE_IN_EVENTS_PER_SEC,
}
_RETENTION = {
    pb.RetentionPolicy.UNKNOWN: RetentionPolicyType.NONE,
    pb.RetentionPolicy.TIME: RetentionPolicyType.TIME,
    pb.RetentionPolicy.SIZE: RetentionPolicyType.SIZE,
}
_TXN_STATES = {
    "OPEN": pb.TxnState.OPEN,
    "COMMITTING": pb.TxnState.COMMITTING,
    "COMMITTED": pb.TxnState.COMMITTED,
    "ABORTING": pb.TxnState.ABORTING,
    "ABORTED": pb.TxnState.ABORTED,
}
_RG_RETENTION = {
    0: "NONE",
    1: "MANUAL_RELEASE_AT_USER_STREAMCUT",
    2: "AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT",
}


class RpcError(Exception):
    """An answer that is a gRPC status code (raised in the rpc's thread, sent by its task)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- the caller -------------------------------------------------------------------------------


def _authorization(metadata: Iterable[tuple[str, Any]] | None) -> str:
    for key, value in metadata or ():
        if key.lower() == "authorization":
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""


def caller(header: str, peer: str) -> Any:
    """The user the ``authorization`` value names; RpcError UNAUTHENTICATED otherwise (None
    when authentication is off)."""
    if not settings.MILLRACE.auth_enabled:
        return None
    method, _, credential = header.strip().partition(" ")
    credential = credential.strip()
    if not method or not credential:
        raise RpcError(
            grpc.StatusCode.UNAUTHENTICATED,
            "authentication is on: send 'authorization: Basic <base64 user:password>' or"
            " 'Basic <API token>' (Pravega's client: pravega_client_auth_method=Basic with"
            " pravega_client_auth_username/_password or pravega_client_auth_token)",
        )
    if method.lower() not in ("basic", "bearer"):
        raise RpcError(grpc.StatusCode.UNAUTHENTICATED, f"unknown authorization method {method!r}")
    try:
        user = user_of(credential)
    except TokenExpiredError as exc:
        raise RpcError(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None
    if user is not None:
        return user
    if method.lower() == "basic":
        try:
            name, colon, password = (
                base64.b64decode(credential, validate=True).decode().partition(":")
            )
        except (binascii.Error, UnicodeDecodeError):
            name, colon, password = "", "", ""
        if colon:
            request = HttpRequest()
            request.META["REMOTE_ADDR"] = _peer_address(peer)
            request.path = "/grpc"
            found = authenticate(request, username=name, password=password)
            if found is not None:
                return found
            if getattr(request, "axes_locked_out", False):
                raise RpcError(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "too many failed sign-ins from this address: wait, then try again",
                )
            raise RpcError(grpc.StatusCode.UNAUTHENTICATED, "wrong user name or password")
    raise RpcError(grpc.StatusCode.UNAUTHENTICATED, "invalid token (revoked, rotated or mistyped)")


def _peer_address(peer: str) -> str:
    """``ipv4:127.0.0.1:5000`` -> ``127.0.0.1`` (gRPC's peer strings)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]") or "::1"
    return rest.rpartition(":")[0] or "127.0.0.1"


def _require(user: Any, need: Need) -> None:
    if not may(user, need):
        raise RpcError(grpc.StatusCode.PERMISSION_DENIED, refusal(need))


# -- errors -----------------------------------------------------------------------------------


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status answering ``exc``: the outcomes table's (``controller_app.outcomes``),
    as REST answers it; an error with no row is logged and answered ``INTERNAL``."""
    if isinstance(exc, RpcError):
        return exc.code, str(exc)
    down = service_down(exc)
    if down is not None:
        return grpc.StatusCode.UNAVAILABLE, down[1]
    outcome = outcome_of(exc)
    if outcome is None:
        log.error("gRPC call failed", exc_info=exc)
        return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}"
    return grpc.StatusCode[outcome.grpc], outcome.say(exc)


Handler = Callable[[Any, Any, Any], Any]


def rpc(need: Need) -> Callable[[Handler], Callable[..., Awaitable[Any]]]:
    """An rpc of ``ControllerService``: the body (``self, request, user``, in a thread, Django
    at hand) needs the ``need`` role; its errors become statuses (``status_of``)."""

    def wrap(body: Handler) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(body)
        async def handler(self: ControllerService, request: Any, context: Any) -> Any:
            header = _authorization(context.invocation_metadata())
            try:
                return await asyncio.to_thread(
                    self.run, body, request, header, context.peer(), need
                )
            except Exception as exc:
                code, message = status_of(exc)
                await context.abort(code, message)

        return handler

    return wrap


def _unimplemented(what: str, why: str) -> Callable[..., Awaitable[Any]]:
    async def handler(self: ControllerService, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{what}: {why}")

    return handler


# -- conversions ------------------------------------------------------------------------------


def _stream_info(scope: str, stream: str) -> pb.StreamInfo:
    return pb.StreamInfo(scope=scope, stream=stream)


def _names(info: pb.StreamInfo) -> tuple[str, str]:
    return _scoped("stream", info.scope, info.stream)


def _scoped(kind: str, scope: str, name: str) -> tuple[str, str]:
    """``(scope, name)`` of a request naming a ``kind`` in a scope: both given, neither over
    the name length limit."""
    if not scope or not name:
        raise InvalidArgumentError(f"a {kind} is named by a scope and a name")
    for what, value in (("scope", scope), (kind, name)):
        if len(value) > NAME_LENGTH_MAX:
            raise InvalidArgumentError(f"{what} name is longer than {NAME_LENGTH_MAX} characters")
    return scope, name


def _ranges(stream: Stream, segments: Iterable[Segment]) -> list[pb.SegmentRange]:
    """Pravega's clients key segments by their upper bound and want the last one exactly 1.0."""
    info = _stream_info(stream.scope.name, stream.name)
    out = []
    for segment in sorted(segments, key=lambda g: g.key_start):
        high = 1.0 if math.isclose(segment.key_end, 1.0) else segment.key_end
        out.append(pb.SegmentRange(
            segmentId=pb.SegmentId(streamInfo=info, segmentId=segment.id),
            minKey=segment.key_start, maxKey=high,
        ))  # fmt: skip
    return out


def _cut(cut: Mapping[int, int]) -> dict[int, int]:
    return {int(segment): int(offset) for segment, offset in cut.items()}


def _config_of(request: pb.StreamConfig) -> StreamConfig:
    scaling = request.scalingPolicy
    kind = _SCALING.get(scaling.scaleType)
    retention = _RETENTION.get(request.retentionPolicy.retentionType)
    if kind is None or retention is None:
        raise InvalidArgumentError("unknown scaling or retention policy type")
    fields: dict[str, Any] = {
        "scaling_type": kind,
        "min_segments": scaling.minNumSegments or 1,
        "retention_type": retention,
        "tags": tuple(request.tags.tag),
        "timestamp_aggregation_timeout": request.timestampAggregationTimeout,
        "rollover_size_bytes": request.rolloverSizeBytes,
    }
    if kind != ScalingPolicyType.FIXED_NUM_SEGMENTS:
        fields |= {"target_rate": scaling.targetRate, "scale_factor": scaling.scaleFactor}
    if retention != RetentionPolicyType.NONE:
        fields["retention_value"] = request.retentionPolicy.retentionParam
        if request.retentionPolicy.retentionMax:
            fields["retention_max"] = request.retentionPolicy.retentionMax
    return StreamConfig(**fields).validate()


def _config_message(stream: Stream) -> pb.StreamConfig:
    reverse_scaling = {v: k for k, v in _SCALING.items()}
    reverse_retention = {v: k for k, v in _RETENTION.items()}
    config = pb.StreamConfig(
        streamInfo=_stream_info(stream.scope.name, stream.name),
        scalingPolicy=pb.ScalingPolicy(
            scaleType=reverse_scaling[stream.scaling_type], targetRate=stream.target_rate,  # type: ignore[index]
            scaleFactor=stream.scale_factor, minNumSegments=stream.min_segments,
        ),
        retentionPolicy=pb.RetentionPolicy(
            retentionType=reverse_retention[stream.retention_type],  # type: ignore[index]
            retentionParam=stream.retention_value, retentionMax=stream.retention_max,
        ),
        timestampAggregationTimeout=stream.timestamp_aggregation_timeout,
        rolloverSizeBytes=stream.rollover_size_bytes,
    )  # fmt: skip
    tags = sel.stream_tags(stream)
    if tags:
        config.tags.tag.extend(tags)
    return config


def _txn_uuid(txn_id: pb.TxnId) -> uuid.UUID:
    return uuid.UUID(int=((txn_id.highBits & (2**64 - 1)) << 64) | (txn_id.lowBits & (2**64 - 1)))


def _txn_id(txn: Any) -> pb.TxnId:
    return pb.TxnId(highBits=txn.high_bits, lowBits=txn.low_bits)


def outcome(kind: Any, work: Callable[[], Any], errors: Mapping[Any, int]) -> Any:
    """``kind(status=SUCCESS)`` once ``work()`` is done, or the status ``errors`` gives the
    first error type it raised (in ``errors``' order); other errors propagate."""
    try:
        work()
    except tuple(errors) as exc:
        status = next(value for error, value in errors.items() if isinstance(exc, error))
        return kind(status=status)
    return kind(status=0)


def _page(token: str, names: Iterable[str]) -> tuple[list[str], str]:
    found = list(names)
    return found, found[-1] if found else token


# -- the service ------------------------------------------------------------------------------


class _Base:
    """What every rpc shares: the endpoint's ``address``, the call (``run``), tokens."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address

    def run(self, body: Handler, request: Any, header: str, peer: str, need: Need) -> Any:
        close_old_connections()
        log.debug("rpc %s from %s", body.__name__, peer)
        try:
            user = caller(header, peer)
            _require(user, need)
            return body(self, request, user)
        finally:
            close_old_connections()

    def _token(self, user: Any, scope: str, stream: str) -> str:
        return stream_token_for(user, scope, stream)


class _ScopesAndStreams(_Base):
    """Scopes and streams."""

    # -- scopes ---------------------------------------------------------------------------

    @rpc("operate")
    def createScope(self, request: pb.ScopeInfo, user: Any) -> pb.CreateScopeStatus:
        kind = pb.CreateScopeStatus
        return outcome(kind, lambda: scopes.create_scope(request.scope), {
            AlreadyExistsError: kind.SCOPE_EXISTS, InvalidArgumentError: kind.INVALID_SCOPE_NAME,
        })  # fmt: skip

    @rpc("operate")
    def deleteScope(self, request: pb.ScopeInfo, user: Any) -> pb.DeleteScopeStatus:
        kind = pb.DeleteScopeStatus
        return outcome(kind, lambda: scopes.delete_scope(request.scope), {
            ScopeNotFoundError: kind.SCOPE_NOT_FOUND, PreconditionFailedError: kind.SCOPE_NOT_EMPTY,
        })  # fmt: skip

    deleteScopeRecursive = _unimplemented(
        "deleteScopeRecursive",
        "Millrace deletes empty scopes only: seal and delete the streams, delete the reader"
        " groups, then deleteScope",
    )

    @rpc("read")
    def checkScopeExists(self, request: pb.ScopeInfo, user: Any) -> pb.ExistsResponse:
        return pb.ExistsResponse(exists=Scope.objects.filter(name=request.scope).exists())

    @rpc("read")
    def listScopes(self, request: pb.ScopesRequest, user: Any) -> pb.ScopesResponse:
        after = request.continuationToken.token
        rows = Scope.objects.filter(name__gt=after).order_by("name")
        names, token = _page(after, rows.values_list("name", flat=True)[:PAGE_SIZE])
        return pb.ScopesResponse(scopes=names, continuationToken=pb.ContinuationToken(token=token))

    # -- streams --------------------------------------------------------------------------

    @rpc("operate")
    def createStream(self, request: pb.StreamConfig, user: Any) -> pb.CreateStreamStatus:
        status = pb.CreateStreamStatus
        scope, name = request.streamInfo.scope, request.streamInfo.stream
        if not Scope.objects.filter(name=scope).exists():
            return status(status=status.SCOPE_NOT_FOUND)
        try:
            check_name("stream", name)
        except InvalidArgumentError:
            return status(status=status.INVALID_STREAM_NAME)
        config = _config_of(request)
        if Stream.objects.filter(scope__name=scope, name=name).exists():
            return status(status=status.STREAM_EXISTS)
        try:
            streams.create_stream(segment_store(), scope, name, config)
        except AlreadyExistsError:
            return status(status=status.STREAM_EXISTS)
        return status(status=status.SUCCESS)

    def _update_status(
        self, scope: str, name: str, work: Callable[[], Any]
    ) -> pb.UpdateStreamStatus:
        status = pb.UpdateStreamStatus
        try:
            work()
        except ScopeNotFoundError:
            return status(status=status.SCOPE_NOT_FOUND)
        except StreamNotFoundError:
            if not Scope.objects.filter(name=scope).exists():
                return status(status=status.SCOPE_NOT_FOUND)
            return status(status=status.STREAM_NOT_FOUND)
        return status(status=status.SUCCESS)

    @rpc("operate")
    def updateStream(self, request: pb.StreamConfig, user: Any) -> pb.UpdateStreamStatus:
        scope, name = _names(request.streamInfo)
        config = _config_of(request)
        return self._update_status(
            scope, name,
            lambda: streams.update_stream(scope, name, config, wait=FACE_WAIT_SECONDS),
        )  # fmt: skip

    @rpc("operate")
    def truncateStream(self, request: pb.StreamCut, user: Any) -> pb.UpdateStreamStatus:
        scope, name = _names(request.streamInfo)
        cut = _cut(request.cut)
        return self._update_status(
            scope, name,
            lambda: truncation.truncate_stream(
                segment_store(), scope, name, cut, wait=FACE_WAIT_SECONDS
            ),
        )  # fmt: skip

    @rpc("operate")
    def sealStream(self, request: pb.StreamInfo, user: Any) -> pb.UpdateStreamStatus:
        scope, name = _names(request)
        return self._update_status(
            scope, name, lambda: streams.seal_stream(scope, name, wait=FACE_WAIT_SECONDS)
        )

    @rpc("operate")
    def deleteStream(self, request: pb.StreamInfo, user: Any) -> pb.DeleteStreamStatus:
        status = pb.DeleteStreamStatus
        scope, name = _names(request)
        try:
            row = get_stream(scope, name)
        except NotFoundError:
            return status(status=status.STREAM_NOT_FOUND)
        if row.state != StreamState.SEALED:
            return status(status=status.STREAM_NOT_SEALED)
        try:
            streams.delete_stream(scope, name, wait=FACE_WAIT_SECONDS)
        except StreamNotFoundError:
            return status(status=status.STREAM_NOT_FOUND)
        return status(status=status.SUCCESS)

    @rpc("read")
    def checkStreamExists(self, request: pb.StreamInfo, user: Any) -> pb.ExistsResponse:
        found = Stream.objects.filter(scope__name=request.scope, name=request.stream).exists()
        return pb.ExistsResponse(exists=found)

    @rpc("read")
    def getStreamConfiguration(self, request: pb.StreamInfo, user: Any) -> pb.StreamConfig:
        return _config_message(get_stream(*_names(request)))

    @staticmethod
    def _stream_page(scope: str, rows: list[Stream], token: str) -> pb.StreamsInScopeResponse:
        """A page of ``rows``; ``token``: where the next page starts (the same when empty)."""
        return pb.StreamsInScopeResponse(
            streams=[_stream_info(scope, row.name) for row in rows],
            status=pb.StreamsInScopeResponse.SUCCESS,
            continuationToken=pb.ContinuationToken(token=token),
        )

    @rpc("read")
    def listStreamsInScope(
        self, request: pb.StreamsInScopeRequest, user: Any
    ) -> pb.StreamsInScopeResponse:
        scope = Scope.objects.filter(name=request.scope.scope).first()
        if scope is None:
            return pb.StreamsInScopeResponse(status=pb.StreamsInScopeResponse.SCOPE_NOT_FOUND)
        after = request.continuationToken.token
        rows = list(sel.streams_in(scope, after=after)[:PAGE_SIZE])
        return self._stream_page(scope.name, rows, rows[-1].name if rows else after)

    @rpc("read")
    def listStreamsInScopeForTag(
        self, request: pb.StreamsInScopeWithTagRequest, user: Any
    ) -> pb.StreamsInScopeResponse:
        scope = Scope.objects.filter(name=request.scope.scope).first()
        if scope is None:
            return pb.StreamsInScopeResponse(status=pb.StreamsInScopeResponse.SCOPE_NOT_FOUND)
        token = request.continuationToken.token
        try:
            after = int(token or 0)
        except ValueError:
            raise InvalidArgumentError(f"not a continuation token: {token!r}") from None
        rows = sel.streams_with_tag(scope, request.tag, after=after, limit=PAGE_SIZE)
        return self._stream_page(scope.name, rows, str(rows[-1].pk) if rows else token)


class _Segments(_Base):
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
        row = (
            Stream.objects.select_related("scope")
            .filter(scope__name=request.streamInfo.scope, name=request.streamInfo.stream)
            .first()
        )
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
        elif not Scope.objects.filter(name=scope).exists():
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
                scale_time=request.scaleTimestamp or None, wait=FACE_WAIT_SECONDS,
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


class _Transactions(_Base):
    """Transactions and writers' marks."""

    # -- transactions ---------------------------------------------------------------------

    @rpc("operate")
    def createTransaction(self, request: pb.CreateTxnRequest, user: Any) -> pb.CreateTxnResponse:
        scope, name = _names(request.streamInfo)
        txn = transactions.create_transaction(
            segment_store(), scope, name, lease_ms=request.lease or transactions.LEASE_MS_DEFAULT
        )
        row = get_stream(scope, name)
        segments = sel.epoch_record(row, txn.epoch).segment_list()
        return pb.CreateTxnResponse(
            txnId=_txn_id(txn), activeSegments=_ranges(row, segments),
            delegationToken=self._token(user, scope, name),
        )  # fmt: skip

    def _txn_status(self, work: Callable[[], Any]) -> pb.TxnStatus:
        kind = pb.TxnStatus
        return outcome(kind, work, {
            StreamNotFoundError: kind.STREAM_NOT_FOUND,
            TransactionNotFoundError: kind.TRANSACTION_NOT_FOUND,
        })  # fmt: skip

    @rpc("operate")
    def commitTransaction(self, request: pb.TxnRequest, user: Any) -> pb.TxnStatus:
        scope, name = _names(request.streamInfo)
        txn_id = _txn_uuid(request.txnId)
        stamp = None if request.timestamp == _NO_TIMESTAMP else request.timestamp
        return self._txn_status(lambda: transactions.commit_transaction(
            scope, name, txn_id, writer_id=request.writerId, timestamp=stamp
        ))  # fmt: skip

    @rpc("operate")
    def abortTransaction(self, request: pb.TxnRequest, user: Any) -> pb.TxnStatus:
        scope, name = _names(request.streamInfo)
        txn_id = _txn_uuid(request.txnId)
        return self._txn_status(lambda: transactions.abort_transaction(scope, name, txn_id))

    @rpc("operate")
    def pingTransaction(self, request: pb.PingTxnRequest, user: Any) -> pb.PingTxnStatus:
        status = pb.PingTxnStatus
        scope, name = _names(request.streamInfo)
        txn_id = _txn_uuid(request.txnId)
        try:
            transactions.ping_transaction(scope, name, txn_id, request.lease)
        except InvalidArgumentError:
            return status(status=status.LEASE_TOO_LARGE)
        except PreconditionFailedError:
            state = transactions.transaction_state(scope, name, txn_id)
            if state == "COMMITTED" or state == "COMMITTING":
                return status(status=status.COMMITTED)
            if state in ("ABORTED", "ABORTING"):
                return status(status=status.ABORTED)
            return status(status=status.MAX_EXECUTION_TIME_EXCEEDED)
        except TransactionNotFoundError:
            return status(status=status.UNKNOWN)
        return status(status=status.OK)

    @rpc("read")
    def checkTransactionState(self, request: pb.TxnRequest, user: Any) -> pb.TxnState:
        scope, name = _names(request.streamInfo)
        try:
            state = transactions.transaction_state(scope, name, _txn_uuid(request.txnId))
        except TransactionNotFoundError:
            return pb.TxnState(state=pb.TxnState.UNKNOWN)
        return pb.TxnState(state=_TXN_STATES.get(state, pb.TxnState.UNKNOWN))

    @rpc("read")
    def listCompletedTransactions(
        self, request: pb.ListCompletedTxnRequest, user: Any
    ) -> pb.ListCompletedTxnResponse:
        row = get_stream(*_names(request.streamInfo))
        done = CompletedTransaction.objects.filter(stream=row).order_by("-pk")[:PAGE_SIZE]
        return pb.ListCompletedTxnResponse(response=[
            pb.TxnResponse(
                txnId=_txn_id(txn),
                status=pb.TxnResponse.COMMITTED if txn.state == "COMMITTED"
                else pb.TxnResponse.ABORTED,
            )
            for txn in done
        ])  # fmt: skip

    # -- writers' marks -------------------------------------------------------------------

    @rpc("operate")
    def noteTimestampFromWriter(
        self, request: pb.TimestampFromWriter, user: Any
    ) -> pb.TimestampResponse:
        status = pb.TimestampResponse
        scope, name = _names(request.position.streamInfo)
        try:
            marks.note_writer_mark(
                scope, name, request.writer, request.timestamp, _cut(request.position.cut)
            )
        except InvalidStreamCutError:
            return status(result=status.INVALID_POSITION)
        except InvalidArgumentError:
            return status(result=status.INVALID_TIME)
        return status(result=status.SUCCESS)

    @rpc("operate")
    def removeWriter(self, request: pb.RemoveWriterRequest, user: Any) -> pb.RemoveWriterResponse:
        status = pb.RemoveWriterResponse
        try:
            scope, name = _names(request.stream)
            row = get_stream(scope, name)
        except (NotFoundError, InvalidArgumentError):
            return status(result=status.STREAM_DOES_NOT_EXIST)
        removed = marks.remove_writer(row, request.writer)
        return status(result=status.SUCCESS if removed else status.UNKNOWN_WRITER)


class _Groups(_Base):
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
        if not Scope.objects.filter(name=request.scope).exists():
            return status(status=status.SCOPE_NOT_FOUND)
        try:
            check_name("reader group", request.readerGroupName)
        except InvalidArgumentError:
            return status(status=status.INVALID_RG_NAME)
        group = reader_groups.create_reader_group(
            segment_store(), request.scope, request.readerGroupName, self._group_config(request)
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

    @rpc("operate")
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
        found = {self.address}
        rows = Node.objects.filter(
            role=NodeRole.CONTROLLER, session=SessionState.LIVE, grpc_port__isnull=False
        )
        found |= {(host, port) for host, port in rows.values_list("host", "grpc_port")}
        return pb.ServerResponse(
            nodeURI=[pb.NodeUri(endpoint=host, port=port) for host, port in sorted(found)]
        )

    getControllerToBucketMapping = _unimplemented(
        "getControllerToBucketMapping",
        "Millrace's retention and watermark buckets are taken by lease by whichever beat runs"
        " (see GET /v1/cluster), not mapped to controllers",
    )


class _KeyValueTables(_Base):
    """Key-value tables (``controller_app.workflows.kvtables``)."""

    @rpc("operate")
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

    @rpc("read")
    def listKeyValueTablesInScope(
        self, request: pb.KVTablesInScopeRequest, user: Any
    ) -> pb.KVTablesInScopeResponse:
        kind = pb.KVTablesInScopeResponse
        scope = Scope.objects.filter(name=request.scope.scope).first()
        if scope is None:
            return kind(status=kind.SCOPE_NOT_FOUND)
        after = request.continuationToken.token
        names = KeyValueTable.objects.filter(scope=scope, name__gt=after).order_by("name")
        found, token = _page(after, names.values_list("name", flat=True)[:PAGE_SIZE])
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

    @rpc("operate")
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


class ControllerService(_ScopesAndStreams, _Segments, _Transactions, _Groups, _KeyValueTables,
                        pb_grpc.ControllerServiceServicer):  # fmt: skip
    """Every rpc of ``ControllerService`` (see the module docstring); ``address`` is this
    controller's gRPC endpoint."""
