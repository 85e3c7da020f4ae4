"""REST views: validate the request, call one selector or workflow, shape the answer.

Pravega's admin API (``/v1/scopes ...``) keeps Pravega's paths, status codes and field names.
Millrace's additions live under the stream (``.../scale``, ``.../truncate``, ``.../segments``,
``.../transactions`` ...). Request workflows (update, seal, delete, scale, truncate) wait for
the Celery worker to finish them, up to ``FACE_WAIT_SECONDS`` (then 504
``workflow-timeout``: the work goes on).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controller_app import audit, stream_reads
from controller_app import selectors as sel
from controller_app.access import grants
from controller_app.access.tokens import stream_token_for
from controller_app.api import serializers as s
from controller_app.errors import InvalidArgumentError, InvalidStreamCutError
from controller_app.models import Scope, Stream
from controller_app.registry import policies
from controller_app.segment_client import read_traffic, segment_store
from controller_app.segments import Segment
from controller_app.workflows import marks, scale, scopes, streams, transactions, truncate
from controller_app.workflows.common import get_stream
from millrace.kernel import defaults

#: How long a request workflow is waited for before the answer is 504 (it goes on).
#: Streams listed per scope, at most (Pravega pages; one page here).
STREAMS_LIST_MAX = 1000


def _valid(serializer_class: type, data: Any) -> Any:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer


def _property(stream: Stream) -> dict[str, Any]:
    return s.StreamPropertySerializer.of(stream, sel.stream_tags(stream))


def _segment(stream: Stream, segment: Segment, offset: int | None = None) -> dict[str, Any]:
    item = {
        "segmentId": segment.id,
        "number": segment.number,
        "epoch": segment.creation_epoch,
        "name": sel.segment_name(stream, segment.id),
        "keyStart": segment.key_start,
        "keyEnd": segment.key_end,
    }
    if offset is not None:
        item["offset"] = offset
    return item


# -- scopes ------------------------------------------------------------------------------------


class ScopesView(APIView):
    listing = ("GET",)
    audit_actions = {"POST": "scope.create"}

    @extend_schema(operation_id="listScopes", responses=s.ScopesListSerializer)
    def get(self, request: Request) -> Response:
        every = Scope.objects.order_by("name").values_list("name", flat=True)
        names = grants.visible(request.user, every, grants.scope_resource)
        return Response({"scopes": [{"scopeName": n} for n in names]})

    @extend_schema(
        operation_id="createScope",
        request=s.ScopeCreateSerializer,
        responses={201: s.ScopeSerializer},
    )
    def grant_resource(self, request: Request) -> str:
        """A create asks for MANAGE on the scope it names (a grant on ``team-a*`` may)."""
        if request.method != "POST" or not isinstance(request.data, dict):
            return grants.ROOT
        return grants.scope_resource(str(request.data.get("scopeName", "")))

    def post(self, request: Request) -> Response:
        data = _valid(s.ScopeCreateSerializer, request.data).validated_data
        audit.name_object(request, data["scopeName"])
        scope = scopes.create_scope(data["scopeName"])
        return Response({"scopeName": scope.name}, status=201)


class ScopeView(APIView):
    audit_actions = {"DELETE": "scope.delete"}

    @extend_schema(operation_id="getScope", responses=s.ScopeSerializer)
    def get(self, request: Request, scope: str) -> Response:
        return Response({"scopeName": scopes.get_scope(scope).name})

    @extend_schema(operation_id="deleteScope", responses={204: None})
    def delete(self, request: Request, scope: str) -> Response:
        scopes.delete_scope(scope)
        return Response(status=204)


# -- streams -----------------------------------------------------------------------------------


class StreamsView(APIView):
    listing = ("GET",)
    audit_actions = {"POST": "stream.create"}

    @extend_schema(
        operation_id="listStreams",
        parameters=[
            OpenApiParameter("filter_type", str, enum=["showInternalStreams", "tag"]),
            OpenApiParameter("filter_value", str),
        ],
        responses=s.StreamsListSerializer,
    )
    def get(self, request: Request, scope: str) -> Response:
        scope_row = scopes.get_scope(scope)
        if not grants.reaches_into(request.user, grants.scope_resource(scope)):
            grants.authorize(request.user, grants.scope_resource(scope), grants.READ)
        kind = request.query_params.get("filter_type")
        value = request.query_params.get("filter_value", "")
        if kind not in (None, "showInternalStreams", "tag"):
            raise InvalidArgumentError("filter_type must be showInternalStreams or tag")
        if kind == "tag":
            found = sel.streams_with_tag(scope_row, value, limit=STREAMS_LIST_MAX)
        else:
            rows = sel.streams_in(scope_row, internal=kind == "showInternalStreams")
            found = list(rows[:STREAMS_LIST_MAX])
        found = grants.readable(request.user, found, lambda x: grants.stream_prn(scope, x.name))
        tags = sel.tags_of(found)
        return Response(
            {"streams": [s.StreamPropertySerializer.of(x, tags.get(x.pk, [])) for x in found]}
        )

    @extend_schema(
        operation_id="createStream",
        request=s.StreamCreateSerializer,
        responses={201: s.StreamPropertySerializer},
    )
    def post(self, request: Request, scope: str) -> Response:
        scopes.get_scope(scope)  # 404 before 400, as Pravega answers
        serializer = _valid(s.StreamCreateSerializer, request.data)
        audit.name_object(request, scope, serializer.validated_data["streamName"])
        stream = streams.create_stream(
            segment_store(), scope, serializer.validated_data["streamName"], serializer.to_config()
        )
        binding = serializer.validated_data.get("schema")
        if binding:
            streams.bind_schema(stream, **binding)
        return Response(_property(stream), status=201)


class StreamView(APIView):
    audit_actions = {"PUT": "stream.update", "DELETE": "stream.delete"}

    @extend_schema(operation_id="getStream", responses=s.StreamPropertySerializer)
    def get(self, request: Request, scope: str, stream: str) -> Response:
        return Response(_property(get_stream(scope, stream)))

    @extend_schema(
        operation_id="updateStream",
        request=s.StreamUpdateSerializer,
        responses=s.StreamPropertySerializer,
    )
    def put(self, request: Request, scope: str, stream: str) -> Response:
        get_stream(scope, stream)
        serializer = _valid(s.StreamUpdateSerializer, request.data)
        streams.update_stream(
            scope, stream, serializer.to_config(), wait=defaults.WORKFLOW_WAIT_SECONDS
        )
        return Response(_property(get_stream(scope, stream)))

    @extend_schema(operation_id="deleteStream", responses={204: None})
    def delete(self, request: Request, scope: str, stream: str) -> Response:
        streams.delete_stream(scope, stream, wait=defaults.WORKFLOW_WAIT_SECONDS)
        return Response(status=204)


class StreamSchemaView(APIView):
    """The stream's value subject in the schema registry and how its appends are held to it."""

    audit_actions = {"PUT": "stream.schema"}

    @extend_schema(operation_id="getStreamSchema", responses=s.StreamSchemaSerializer)
    def get(self, request: Request, scope: str, stream: str) -> Response:
        return Response(policies.binding(get_stream(scope, stream)))

    @extend_schema(
        operation_id="updateStreamSchema",
        request=s.StreamSchemaSerializer,
        responses=s.StreamSchemaSerializer,
    )
    def put(self, request: Request, scope: str, stream: str) -> Response:
        row = get_stream(scope, stream)
        serializer = _valid(s.StreamSchemaSerializer, request.data)
        return Response(policies.binding(streams.bind_schema(row, **serializer.validated_data)))


class StreamStateView(APIView):
    audit_actions = {"PUT": "stream.seal"}

    @extend_schema(
        operation_id="updateStreamState",
        request=s.StreamStateSerializer,
        responses=s.StreamStateSerializer,
    )
    def put(self, request: Request, scope: str, stream: str) -> Response:
        get_stream(scope, stream)
        _valid(s.StreamStateSerializer, request.data)
        streams.seal_stream(scope, stream, wait=defaults.WORKFLOW_WAIT_SECONDS)
        return Response({"streamState": "SEALED"})


class ScalingEventsView(APIView):
    @extend_schema(
        operation_id="getScalingEvents",
        parameters=[
            OpenApiParameter("from", OpenApiTypes.INT64, required=True),
            OpenApiParameter("to", OpenApiTypes.INT64, required=True),
        ],
        responses=s.ScalingEventListSerializer,
    )
    def get(self, request: Request, scope: str, stream: str) -> Response:
        row = get_stream(scope, stream)
        start, end = _int_param(request, "from"), _int_param(request, "to")
        if start > end:
            raise InvalidArgumentError("'from' is after 'to'")
        events = sel.scaling_events(row, start, end)
        return Response(
            {
                "scalingEvents": [
                    {
                        "timestamp": e.timestamp,
                        "segmentList": [
                            {"number": g.number, "startTime": g.creation_time,
                             "keyStart": g.key_start, "keyEnd": g.key_end}
                            for g in e.segments
                        ],
                        "splits": e.splits,
                        "merges": e.merges,
                    }
                    for e in events
                ]
            }
        )  # fmt: skip


def _int_param(request: Request, name: str) -> int:
    text = request.query_params.get(name)
    if text is None:
        raise InvalidArgumentError(f"query parameter {name!r} is required")
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgumentError(f"query parameter {name!r} must be an integer") from None
    if not -(2**63) <= value < 2**63:
        raise InvalidArgumentError(f"query parameter {name!r} is out of range")
    return value


class StreamInfoView(APIView):
    @extend_schema(operation_id="getStreamInfo", responses=s.StreamInfoSerializer)
    def get(self, request: Request, scope: str, stream: str) -> Response:
        row = get_stream(scope, stream)
        return Response({**_property(row), "state": row.state, "currentEpoch": row.current_epoch})


class StreamMetricsView(APIView):
    @extend_schema(
        operation_id="getStreamMetrics",
        responses=s.StreamMetricsSerializer,
        description="The append rates of the stream's current segments, as the segment stores'"
        " traffic monitors measure them (averages over MILLRACE_AUTOSCALE_WINDOW_S).",
    )
    def get(self, request: Request, scope: str, stream: str) -> Response:
        row = get_stream(scope, stream)
        traffic = read_traffic()
        items = []
        for segment in sorted(sel.current_segments(row), key=lambda g: g.key_start):
            name = sel.segment_name(row, segment.id)
            found = traffic.segments.get(name)
            items.append({
                "segmentId": segment.id, "name": name,
                "keyStart": segment.key_start, "keyEnd": segment.key_end,
                "eventsPerSecond": found.events_per_s if found else 0.0,
                "bytesPerSecond": found.bytes_per_s if found else 0.0,
            })  # fmt: skip
        return Response(
            {
                "eventsPerSecond": sum(i["eventsPerSecond"] for i in items),
                "bytesPerSecond": sum(i["bytesPerSecond"] for i in items),
                "segments": items,
            }
        )


class SegmentsView(APIView):
    @extend_schema(
        operation_id="getSegments",
        parameters=[
            OpenApiParameter(
                "at", str, description="current (default), head, or a time in ms since the epoch"
            )
        ],
        responses=s.SegmentsSerializer,
    )
    def get(self, request: Request, scope: str, stream: str) -> Response:
        row = get_stream(scope, stream)
        at = request.query_params.get("at", "current")
        if at == "current":
            items = [_segment(row, g) for g in sel.current_segments(row)]
        elif at == "head":
            items = [_segment(row, g, o) for g, o in sel.head_segments(row).items()]
        else:
            when = _int_param(request, "at")
            items = [_segment(row, g, o) for g, o in sel.segments_at_time(row, when).items()]
        items.sort(key=lambda x: x["keyStart"])
        return Response({"segments": items})


class SegmentView(APIView):
    @extend_schema(operation_id="getSegment", responses=s.SegmentDetailSerializer)
    def get(self, request: Request, scope: str, stream: str, segment_id: int) -> Response:
        row = get_stream(scope, stream)
        record = sel.segment_record(row, segment_id)
        state = segment_store().info(sel.segment_name(row, segment_id))
        return Response(
            {
                **_segment(row, record.as_segment()),
                "exists": state.exists,
                "sealed": state.sealed,
                "length": state.length,
                "startOffset": state.start_offset,
                "sealedSize": record.sealed_size,
            }
        )


class SuccessorsView(APIView):
    @extend_schema(operation_id="getSuccessors", responses=s.SuccessorsSerializer)
    def get(self, request: Request, scope: str, stream: str, segment_id: int) -> Response:
        row = get_stream(scope, stream)
        found = sel.successors(row, segment_id)
        return Response(
            {
                "successors": [
                    {**_segment(row, g), "predecessors": preds}
                    for g, preds in sorted(found.items(), key=lambda kv: kv[0].key_start)
                ]
            }
        )


class SegmentUriView(APIView):
    @extend_schema(operation_id="getSegmentUri", responses=s.SegmentUriSerializer)
    def get(self, request: Request, scope: str, stream: str, segment_id: int) -> Response:
        row = get_stream(scope, stream)
        sel.segment_record(row, segment_id)
        uri = sel.segment_uri(row, segment_id)
        name = sel.segment_name(row, segment_id)
        return Response({"segment": name, "host": uri.host, "port": uri.port, "tls": uri.tls})


class SegmentsBetweenView(APIView):
    needs = {"POST": "read"}

    @extend_schema(
        operation_id="getSegmentsBetween",
        request=s.CutsRequestSerializer,
        responses=s.SegmentsSerializer,
    )
    def post(self, request: Request, scope: str, stream: str) -> Response:
        row = get_stream(scope, stream)
        data = _valid(s.CutsRequestSerializer, request.data).validated_data
        found = sel.segments_between(row, data.get("fromStreamCut"), data.get("toStreamCut"))
        return Response({"segments": [_segment(row, g) for g in found]})


class StreamCutValidityView(APIView):
    needs = {"POST": "read"}

    @extend_schema(
        operation_id="checkStreamCut",
        request=s.StreamCutRequestSerializer,
        responses=s.ValiditySerializer,
    )
    def post(self, request: Request, scope: str, stream: str) -> Response:
        row = get_stream(scope, stream)
        cut = _valid(s.StreamCutRequestSerializer, request.data).validated_data["streamCut"]
        try:
            sel.validate_stream_cut(row, cut)
        except InvalidStreamCutError as exc:
            return Response({"valid": False, "message": str(exc)})
        return Response({"valid": True, "message": ""})


class StreamSizeView(APIView):
    needs = {"POST": "read"}

    @extend_schema(
        operation_id="getSizeTillStreamCut",
        request=s.StreamCutRequestSerializer,
        responses=s.SizeSerializer,
    )
    def post(self, request: Request, scope: str, stream: str) -> Response:
        row = get_stream(scope, stream)
        cut = _valid(s.StreamCutRequestSerializer, request.data).validated_data["streamCut"]
        return Response({"size": sel.size_till_stream_cut(row, cut)})


class NextStreamCutView(APIView):
    """Pravega's ``getNextStreamCut``: the cut about ``approxBytes`` after a cut, on event
    boundaries (``stream_reads.next_cut``); Spark's ``approx_bytes_per_trigger`` plans its
    micro-batches with it."""

    needs = {"POST": "read"}

    @extend_schema(
        operation_id="getNextStreamCut",
        request=s.NextCutRequestSerializer,
        responses=s.NextCutSerializer,
    )
    def post(self, request: Request, scope: str, stream: str) -> Response:
        row = get_stream(scope, stream)
        data = _valid(s.NextCutRequestSerializer, request.data).validated_data
        cut = {g.id: o for g, o in sel.validate_stream_cut(row, data["streamCut"]).items()}
        found, moved = stream_reads.next_cut(segment_store(), row, cut, data["approxBytes"])
        return Response({"streamCut": {str(k): v for k, v in found.items()}, "bytes": moved})


# -- Millrace's additions: scale, truncate ------------------------------------------------------


class ScaleView(APIView):
    audit_actions = {"POST": "stream.scale"}

    @extend_schema(
        operation_id="scaleStream",
        request=s.ScaleRequestSerializer,
        responses=s.ScaleResultSerializer,
    )
    def post(self, request: Request, scope: str, stream: str) -> Response:
        get_stream(scope, stream)
        data = _valid(s.ScaleRequestSerializer, request.data).validated_data
        job = scale.scale_stream(
            scope,
            stream,
            data["sealedSegments"],
            [tuple(r) for r in data["newRanges"]],
            scale_time=data.get("scaleTime"),
            wait=defaults.WORKFLOW_WAIT_SECONDS,
        )
        row = get_stream(scope, stream)
        return Response(
            {
                "status": job.state,
                "epoch": row.current_epoch,
                "segments": [_segment(row, g) for g in sel.current_segments(row)],
            }
        )


class TruncateView(APIView):
    audit_actions = {"POST": "stream.truncate"}

    @extend_schema(
        operation_id="truncateStream",
        request=s.StreamCutRequestSerializer,
        responses=s.TruncateResultSerializer,
    )
    def post(self, request: Request, scope: str, stream: str) -> Response:
        get_stream(scope, stream)
        cut = _valid(s.StreamCutRequestSerializer, request.data).validated_data["streamCut"]
        truncate.truncate_stream(
            segment_store(), scope, stream, cut, wait=defaults.WORKFLOW_WAIT_SECONDS
        )
        row = get_stream(scope, stream)
        return Response({"head": [_segment(row, g, o) for g, o in sel.head_segments(row).items()]})


# -- Millrace's additions: transactions and writer marks ----------------------------------------


def _txn(scope: str, stream: str, txn: Any, with_segments: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "txnId": str(transactions.transaction_uuid(txn)),
        "state": str(txn.state),
    }
    if with_segments:
        row = get_stream(scope, stream)
        out["epoch"] = txn.epoch
        epoch_segments = sel.epoch_record(row, txn.epoch).segment_list()
        shadows = [
            transactions.shadow_name(sel.segment_name(row, g.id), txn) for g in epoch_segments
        ]
        out["segments"] = shadows
        out["shadowSegments"] = [
            {"name": name, "parentId": g.id, "keyStart": g.key_start, "keyEnd": g.key_end}
            for name, g in zip(shadows, epoch_segments, strict=True)
        ]
    return out


class TransactionsView(APIView):
    @extend_schema(
        operation_id="listOpenTransactions",
        parameters=[OpenApiParameter("writerId", str, required=True)],
        responses=s.OpenTransactionsSerializer,
        description="The stream's open transactions begun by ``writerId`` (at most 1000).",
    )
    def get(self, request: Request, scope: str, stream: str) -> Response:
        row = get_stream(scope, stream)
        writer = request.query_params.get("writerId")
        if writer is None:
            raise InvalidArgumentError("query parameter 'writerId' is required")
        found = sel.live_transactions(row.scope, row, limit=1000, writer_id=writer)
        items = [
            {"txnId": str(transactions.transaction_uuid(t)), "state": str(t.state),
             "writerId": t.writer_id}
            for t in found if t.state == "OPEN"
        ]  # fmt: skip
        return Response({"transactions": items})

    @extend_schema(
        operation_id="createTransaction",
        request=s.TransactionCreateSerializer,
        responses={201: s.TransactionSerializer},
    )
    def post(self, request: Request, scope: str, stream: str) -> Response:
        get_stream(scope, stream)
        data = _valid(s.TransactionCreateSerializer, request.data).validated_data
        txn = transactions.create_transaction(
            segment_store(), scope, stream, lease_ms=data["leaseMs"], writer_id=data["writerId"]
        )
        return Response(_txn(scope, stream, txn, with_segments=True), status=201)


class TransactionView(APIView):
    @extend_schema(operation_id="getTransactionState", responses=s.TransactionSerializer)
    def get(self, request: Request, scope: str, stream: str, txn_id: str) -> Response:
        txn = transactions.parse_txn_id(txn_id)
        state = transactions.transaction_state(scope, stream, txn)
        row = transactions.open_transaction(scope, stream, txn) if state == "OPEN" else None
        if row is not None:  # with its shadow segments: another client may write to it
            return Response(_txn(scope, stream, row, with_segments=True))
        return Response({"txnId": str(txn), "state": state})


class TransactionPingView(APIView):
    @extend_schema(
        operation_id="pingTransaction", request=s.PingSerializer, responses=s.TransactionSerializer
    )
    def post(self, request: Request, scope: str, stream: str, txn_id: str) -> Response:
        txn = transactions.parse_txn_id(txn_id)
        data = _valid(s.PingSerializer, request.data).validated_data
        row = transactions.ping_transaction(scope, stream, txn, data["leaseMs"])
        return Response(_txn(scope, stream, row))


class TransactionCommitView(APIView):
    audit_actions = {"POST": "transaction.commit"}

    @extend_schema(
        operation_id="commitTransaction",
        request=s.CommitSerializer,
        responses=s.TransactionSerializer,
    )
    def post(self, request: Request, scope: str, stream: str, txn_id: str) -> Response:
        txn = transactions.parse_txn_id(txn_id)
        data = _valid(s.CommitSerializer, request.data).validated_data
        row = transactions.commit_transaction(
            scope, stream, txn, writer_id=data["writerId"], timestamp=data.get("timestamp"),
            wait=data.get("wait"),
        )  # fmt: skip
        return Response({"txnId": str(txn), "state": str(row.state)})


class TransactionsCommitView(APIView):
    audit_actions = {"POST": "transaction.commit"}

    @extend_schema(
        operation_id="commitTransactions",
        request=s.CommitManySerializer,
        responses=s.TransactionsStateSerializer,
        description="Commit several transactions of the stream at once, in the order given:"
        " all of them, or (if one cannot be committed: aborted, timed out, unknown) none, and"
        " the error names it. With ``wait``, the answer comes once all are COMMITTED.",
    )
    def post(self, request: Request, scope: str, stream: str) -> Response:
        data = _valid(s.CommitManySerializer, request.data).validated_data
        rows = transactions.commit_transactions(
            scope, stream, data["txnIds"], timestamp=data.get("timestamp"), wait=data.get("wait")
        )
        items = [
            {"txnId": str(txn), "state": str(row.state)}
            for txn, row in zip(data["txnIds"], rows, strict=True)
        ]
        return Response({"transactions": items})


class TransactionAbortView(APIView):
    audit_actions = {"POST": "transaction.abort"}

    @extend_schema(
        operation_id="abortTransaction",
        request=s.AbortSerializer,
        responses=s.TransactionSerializer,
    )
    def post(self, request: Request, scope: str, stream: str, txn_id: str) -> Response:
        txn = transactions.parse_txn_id(txn_id)
        data = _valid(s.AbortSerializer, request.data).validated_data
        row = transactions.abort_transaction(scope, stream, txn, wait=data.get("wait"))
        return Response({"txnId": str(txn), "state": str(row.state)})


class DelegationTokenView(APIView):
    needs = {"POST": "read"}

    @extend_schema(
        operation_id="getDelegationToken", request=None, responses=s.DelegationTokenSerializer
    )
    def post(self, request: Request, scope: str, stream: str) -> Response:
        """A segment store delegation token for the stream's segments: read and update for an
        operator, read only for a viewer."""
        get_stream(scope, stream)
        token = stream_token_for(request.user, scope, stream)
        ttl = settings.MILLRACE.token_ttl_seconds
        return Response({"token": token, "expiresIn": ttl if token else 0})


class WriterMarksView(APIView):
    @extend_schema(
        operation_id="noteWriterMark",
        request=s.WriterMarkSerializer,
        responses=s.WriterMarkResultSerializer,
    )
    def post(self, request: Request, scope: str, stream: str) -> Response:
        data = _valid(s.WriterMarkSerializer, request.data).validated_data
        mark = marks.note_writer_mark(
            scope, stream, data["writerId"], data["timestamp"], data.get("position") or {}
        )
        return Response({"writerId": mark.writer_id, "timestamp": mark.timestamp})


class WatermarkView(APIView):
    @extend_schema(
        operation_id="getWatermark",
        responses=s.WatermarkSerializer,
        description="The stream's newest watermark; 404 `no-watermark` until it has one.",
    )
    def get(self, request: Request, scope: str, stream: str) -> Response:
        return Response(marks.latest_watermark(scope, stream).as_json())
