"""What every rpc of ``ControllerService`` shares: authenticating the caller, the grants check
(``controller_app.access.grants``: the resource is read off the request message), errors as statuses
(``status_of``), the base class of the areas and the message helpers.

See ``controller_app.grpc.service`` for how rpcs answer.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
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

from controller_app import audit
from controller_app import selectors as sel
from controller_app.access import grants
from controller_app.access.roles import Need, may, refusal
from controller_app.access.tokens import TokenExpiredError, stream_token_for, user_of
from controller_app.choices import (
    RetentionPolicyType,
    ScalingPolicyType,
)
from controller_app.errors import InvalidArgumentError, PermissionRefusedError
from controller_app.grpc import controller_pb2 as pb
from controller_app.models import AuditEntry, Stream
from controller_app.outages import service_down
from controller_app.outcomes import outcome_of
from controller_app.segments import Segment
from controller_app.workflows.config import NAME_LENGTH_MAX, StreamConfig

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


def resource_of(message: Any) -> str:
    """The resource a request message names (``controller_app.access.grants``), ``prn::/`` for
    none."""
    fields = message.DESCRIPTOR.fields_by_name
    if message.DESCRIPTOR.name == "StreamInfo":
        return grants.segments_resource(message.scope, message.stream)
    for inner in ("streamInfo", "stream", "position", "streamCut"):
        if inner in fields and fields[inner].message_type is not None:
            return resource_of(getattr(message, inner))
    if "readerGroupName" in fields or "readerGroup" in fields:
        name = getattr(message, "readerGroupName", "") or getattr(message, "readerGroup", "")
        return grants.reader_group_resource(message.scope, name)
    if "kvtName" in fields:
        return grants.kvtable_resource(message.scope, message.kvtName)
    if "scope" in fields:
        scope = message.scope if isinstance(message.scope, str) else message.scope.scope
        return grants.scope_resource(scope)
    return grants.ROOT


def _info_of(message: Any) -> Any:
    return message.streamInfo if "streamInfo" in message.DESCRIPTOR.fields_by_name else message


def _internal_stream(message: Any) -> bool:
    """Whether the message names a writer's or a reader group's own stream (``_MARK...``,
    ``_RG...``): managing one asks only READ_UPDATE of its owner."""
    return str(getattr(_info_of(message), "stream", "")).startswith("_")


def created_in_scope(request: Any) -> str:
    """A create's resource: the scope it creates in (as Pravega asks), or for an internal
    stream, its owner."""
    info = _info_of(request)
    if _internal_stream(request):
        return grants.stream_prn(info.scope, info.stream)
    return grants.scope_resource(info.scope)


@dataclasses.dataclass(frozen=True, slots=True)
class Needs:
    """What an rpc asks of its caller: a role ``need``, and the ``permission`` on the resource
    its request names (by default ``READ`` for ``read``, ``READ_UPDATE`` for ``operate``); a
    ``listing`` lets in whoever may see anything (its body leaves out what it may not)."""

    need: Need
    permission: str | None = None
    listing: bool = False
    #: The resource, when not the one the message names (a create's is its scope).
    resource: Callable[[Any], str] | None = None

    def check(self, user: Any, request: Any) -> None:
        if self.need == "admin":
            if not may(user, "admin"):
                raise RpcError(grpc.StatusCode.PERMISSION_DENIED, refusal("admin"))
            return
        if self.listing:
            if not grants.may_list(user):
                raise RpcError(grpc.StatusCode.PERMISSION_DENIED, grants.NOTHING_VISIBLE)
            return
        resource = (self.resource or resource_of)(request)
        permission = self.permission or (grants.READ if self.need == "read" else grants.READ_UPDATE)
        if permission == grants.MANAGE and _internal_stream(request):
            permission = grants.READ_UPDATE  # (a writer's or a reader group's own stream)
        grants.authorize(user, resource, permission)


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


def rpc(
    need: Need,
    permission: str | None = None,
    *,
    listing: bool = False,
    resource: Callable[[Any], str] | None = None,
) -> Callable[[Handler], Callable[..., Awaitable[Any]]]:
    """An rpc of ``ControllerService``: the body (``self, request, user``, in a thread, Django
    at hand) runs if the caller's grants allow it (``Needs``); its errors become statuses
    (``status_of``)."""
    needs = Needs(need, permission, listing, resource)

    def wrap(body: Handler) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(body)
        async def handler(self: RpcArea, request: Any, context: Any) -> Any:
            header = _authorization(context.invocation_metadata())
            try:
                return await asyncio.to_thread(
                    self.run, body, request, header, context.peer(), needs
                )
            except Exception as exc:
                code, message = status_of(exc)
                await context.abort(code, message)

        return handler

    return wrap


def _unimplemented(what: str, why: str) -> Callable[..., Awaitable[Any]]:
    async def handler(self: RpcArea, request: Any, context: Any) -> Any:
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


class RpcArea:
    """What every rpc shares: the endpoint's ``address``, the call (``run``), tokens."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address

    def run(self, body: Handler, request: Any, header: str, peer: str, needs: Needs) -> Any:
        close_old_connections()
        log.debug("rpc %s from %s", body.__name__, peer)
        user = None
        try:
            user = caller(header, peer)
            needs.check(user, request)
            return body(self, request, user)
        except PermissionRefusedError as exc:
            audit.record(
                f"grpc.{body.__name__}", exc.resource,
                username=user.get_username() if user is not None else "",
                source=AuditEntry.Source.GRPC, address=_peer_address(peer),
                result=AuditEntry.Result.REFUSED, detail=str(exc),
            )  # fmt: skip
            raise
        finally:
            close_old_connections()

    def _token(self, user: Any, scope: str, stream: str) -> str:
        return stream_token_for(user, scope, stream)
