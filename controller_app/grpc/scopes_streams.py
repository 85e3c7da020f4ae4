"""The gRPC rpcs of scopes and streams: create, list, update, seal, delete, tags."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller_app import selectors as sel
from controller_app.access import grants
from controller_app.choices import (
    StreamState,
)
from controller_app.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    PreconditionFailedError,
    ScopeNotFoundError,
    StreamNotFoundError,
)
from controller_app.grpc import controller_pb2 as pb
from controller_app.grpc.common import (
    PAGE_SIZE,
    RpcArea,
    _config_message,
    _config_of,
    _cut,
    _names,
    _page,
    _stream_info,
    _unimplemented,
    created_in_scope,
    outcome,
    rpc,
)
from controller_app.models import (
    Stream,
)
from controller_app.segment_client import segment_store
from controller_app.workflows import (
    scopes,
    streams,
)
from controller_app.workflows import truncate as truncation
from controller_app.workflows.common import get_stream
from controller_app.workflows.config import check_name
from millrace.kernel import defaults


class ScopesAndStreams(RpcArea):
    """Scopes and streams."""

    # -- scopes ---------------------------------------------------------------------------

    @rpc("operate", grants.MANAGE)
    def createScope(self, request: pb.ScopeInfo, user: Any) -> pb.CreateScopeStatus:
        kind = pb.CreateScopeStatus
        return outcome(kind, lambda: scopes.create_scope(request.scope), {
            AlreadyExistsError: kind.SCOPE_EXISTS, InvalidArgumentError: kind.INVALID_SCOPE_NAME,
        })  # fmt: skip

    @rpc("operate", grants.MANAGE)
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
        return pb.ExistsResponse(exists=sel.scope_exists(request.scope))

    @rpc("read", listing=True)
    def listScopes(self, request: pb.ScopesRequest, user: Any) -> pb.ScopesResponse:
        after = request.continuationToken.token
        names, token = _page(after, sel.scope_names(after)[:PAGE_SIZE])
        names = grants.visible(user, names, grants.scope_resource)
        return pb.ScopesResponse(scopes=names, continuationToken=pb.ContinuationToken(token=token))

    # -- streams --------------------------------------------------------------------------

    @rpc("operate", grants.MANAGE, resource=created_in_scope)
    def createStream(self, request: pb.StreamConfig, user: Any) -> pb.CreateStreamStatus:
        status = pb.CreateStreamStatus
        scope, name = request.streamInfo.scope, request.streamInfo.stream
        if not sel.scope_exists(scope):
            return status(status=status.SCOPE_NOT_FOUND)
        try:
            check_name("stream", name)
        except InvalidArgumentError:
            return status(status=status.INVALID_STREAM_NAME)
        config = _config_of(request)
        if sel.stream_exists(scope, name):
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
            if not sel.scope_exists(scope):
                return status(status=status.SCOPE_NOT_FOUND)
            return status(status=status.STREAM_NOT_FOUND)
        return status(status=status.SUCCESS)

    @rpc("operate", grants.MANAGE)
    def updateStream(self, request: pb.StreamConfig, user: Any) -> pb.UpdateStreamStatus:
        scope, name = _names(request.streamInfo)
        config = _config_of(request)
        return self._update_status(
            scope, name,
            lambda: streams.update_stream(scope, name, config, wait=defaults.WORKFLOW_WAIT_SECONDS),
        )  # fmt: skip

    @rpc("operate")
    def truncateStream(self, request: pb.StreamCut, user: Any) -> pb.UpdateStreamStatus:
        scope, name = _names(request.streamInfo)
        cut = _cut(request.cut)
        return self._update_status(
            scope, name,
            lambda: truncation.truncate_stream(
                segment_store(), scope, name, cut, wait=defaults.WORKFLOW_WAIT_SECONDS
            ),
        )  # fmt: skip

    @rpc("operate", grants.MANAGE)
    def sealStream(self, request: pb.StreamInfo, user: Any) -> pb.UpdateStreamStatus:
        scope, name = _names(request)
        return self._update_status(
            scope,
            name,
            lambda: streams.seal_stream(scope, name, wait=defaults.WORKFLOW_WAIT_SECONDS),
        )

    @rpc("operate", grants.MANAGE)
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
            streams.delete_stream(scope, name, wait=defaults.WORKFLOW_WAIT_SECONDS)
        except StreamNotFoundError:
            return status(status=status.STREAM_NOT_FOUND)
        return status(status=status.SUCCESS)

    @rpc("read")
    def checkStreamExists(self, request: pb.StreamInfo, user: Any) -> pb.ExistsResponse:
        found = sel.stream_exists(request.scope, request.stream)
        return pb.ExistsResponse(exists=found)

    @rpc("read")
    def getStreamConfiguration(self, request: pb.StreamInfo, user: Any) -> pb.StreamConfig:
        return _config_message(get_stream(*_names(request)))

    @staticmethod
    def _stream_page(
        user: Any, scope: str, rows: list[Stream], token: str
    ) -> pb.StreamsInScopeResponse:
        """The streams of ``rows`` ``user`` may read; ``token``: where the next page starts (the
        same when empty)."""
        names = grants.visible(user, [row.name for row in rows],
                               lambda name: grants.stream_prn(scope, name))  # fmt: skip
        return pb.StreamsInScopeResponse(
            streams=[_stream_info(scope, name) for name in names],
            status=pb.StreamsInScopeResponse.SUCCESS,
            continuationToken=pb.ContinuationToken(token=token),
        )

    @rpc("read", listing=True)
    def listStreamsInScope(
        self, request: pb.StreamsInScopeRequest, user: Any
    ) -> pb.StreamsInScopeResponse:
        scope = sel.scope_named(request.scope.scope)
        if scope is None:
            return pb.StreamsInScopeResponse(status=pb.StreamsInScopeResponse.SCOPE_NOT_FOUND)
        after = request.continuationToken.token
        rows = list(sel.streams_in(scope, after=after)[:PAGE_SIZE])
        return self._stream_page(user, scope.name, rows, rows[-1].name if rows else after)

    @rpc("read", listing=True)
    def listStreamsInScopeForTag(
        self, request: pb.StreamsInScopeWithTagRequest, user: Any
    ) -> pb.StreamsInScopeResponse:
        scope = sel.scope_named(request.scope.scope)
        if scope is None:
            return pb.StreamsInScopeResponse(status=pb.StreamsInScopeResponse.SCOPE_NOT_FOUND)
        token = request.continuationToken.token
        try:
            after = int(token or 0)
        except ValueError:
            raise InvalidArgumentError(f"not a continuation token: {token!r}") from None
        rows = sel.streams_with_tag(scope, request.tag, after=after, limit=PAGE_SIZE)
        return self._stream_page(user, scope.name, rows, str(rows[-1].pk) if rows else token)
