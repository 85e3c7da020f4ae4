"""REST append and read for HTTP clients.

Read: ``GET /v1/scopes/{scope}/streams/{stream}/events?from=head|tail|time:<ms>|<cut>&limit=N``
gives a page of events and a ``continuation`` (a stream cut text) to pass for the next page
(``controller_app.stream_reads``).

Append: events with routing keys, written by the Python client's writer.

``POST /v1/scopes/{scope}/streams/{stream}/events`` takes a batch of events and answers once
all of them are durable. The events go through the same ``AsyncEventWriter`` as the Python
client (routing keys, append blocks, idempotent writer ids, re-routing when a segment is
sealed); here the writer asks the controller's own tables instead of the REST API
(``controller_app.event_writers``, which the canary writes through too).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controller_app.api import fields
from controller_app.errors import InvalidArgumentError
from controller_app.event_writers import WRITERS
from controller_app.registry.decoding import DECODINGS, EventDecoder
from controller_app.segment_client import segment_store
from controller_app.stream_reads import read_page, start_cut
from controller_app.workflows.common import get_stream
from millrace.client.events import EVENT_BYTES_MAX
from millrace.client.streamcut import StreamCut

#: Events one request may carry (it waits for them as ``event_writers.WRITERS`` says).
EVENTS_PER_REQUEST_MAX = 10_000


class EventSerializer(serializers.Serializer[Any]):
    #: (The event's text, a field of the request: not the serializer's own ``data``.)
    data = fields.CharField(  # type: ignore[assignment]
        required=False, allow_blank=True, help_text="UTF-8 text"
    )
    dataBase64 = fields.CharField(required=False, help_text="bytes, base64")
    routingKey = fields.CharField(required=False, allow_null=True, max_length=1024)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("data" in attrs) == ("dataBase64" in attrs):
            raise serializers.ValidationError("give exactly one of data and dataBase64")
        return attrs


class AppendSerializer(serializers.Serializer[Any]):
    events = EventSerializer(  # type: ignore[call-arg]  # (``many=True`` takes a ListSerializer's)
        many=True, allow_empty=False, max_length=EVENTS_PER_REQUEST_MAX
    )


class AppendedSerializer(serializers.Serializer[Any]):
    appended = serializers.IntegerField()


def _payload(item: dict[str, Any]) -> bytes:
    data: bytes
    if "data" in item:
        data = item["data"].encode("utf-8")
    else:
        try:
            data = base64.b64decode(item["dataBase64"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgumentError("dataBase64 is not valid base64") from None
    if len(data) > EVENT_BYTES_MAX:
        raise InvalidArgumentError(f"an event holds at most {EVENT_BYTES_MAX} bytes")
    return data


READ_LIMIT_DEFAULT, READ_LIMIT_MAX = 100, 10_000


def _event_json(segment_id: int, event: Any, decoder: EventDecoder | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "segmentId": segment_id,
        "offset": event.offset,
        "dataBase64": base64.b64encode(event.data).decode(),
    }
    with contextlib.suppress(UnicodeDecodeError):
        out["data"] = event.data.decode("utf-8")
    if decoder is not None:
        out.update(decoder.decoded(event.data))
    return out


class EventsView(APIView):
    @extend_schema(
        operation_id="readEvents",
        parameters=[
            OpenApiParameter(
                "from", str, description="head (default), tail, time:<ms> or a stream cut"
            ),
            OpenApiParameter(
                "continuation", str, description="the continuation of the previous page"
            ),
            OpenApiParameter("limit", int, description=f"events, 1 to {READ_LIMIT_MAX}"),
            OpenApiParameter(
                "decode",
                str,
                enum=list(DECODINGS),
                description="json: each event also as schemaId and value (decoded by the "
                "schema its header names) or decodeError",
            ),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, scope: str, stream: str) -> Response:
        """A page of events from a position, with the position after it (``continuation``,
        a stream cut text): per routing key in the order written, across scaling. At the
        tail the page is short or empty; ask again with the continuation."""
        row = get_stream(scope, stream)
        where = request.query_params.get("continuation") or request.query_params.get("from", "head")
        raw_limit = request.query_params.get("limit", str(READ_LIMIT_DEFAULT))
        if (
            not raw_limit.isascii()
            or not raw_limit.isdigit()
            or not (1 <= int(raw_limit) <= READ_LIMIT_MAX)
        ):
            raise InvalidArgumentError(f"limit must be an integer from 1 to {READ_LIMIT_MAX}")
        decode = request.query_params.get("decode", "")
        if decode and decode not in DECODINGS:
            raise InvalidArgumentError(f"decode must be one of {', '.join(DECODINGS)}")
        store = segment_store()
        page = read_page(store, row, start_cut(store, row, where), int(raw_limit))
        decoder = EventDecoder() if decode else None
        if decoder is not None:
            decoder.load(e.data for _, e in page.events)
        return Response(
            {
                "events": [_event_json(sid, e, decoder) for sid, e in page.events],
                "continuation": StreamCut(scope, stream, page.position).to_text(),
                "endOfStream": page.end_of_stream,
                "truncatedSegments": page.truncated,
            }
        )

    @extend_schema(
        operation_id="appendEvents",
        request=AppendSerializer,
        responses={201: AppendedSerializer},
    )
    def post(self, request: Request, scope: str, stream: str) -> Response:
        """Append a batch of events; answers once every one is durable (per routing key in
        order, as the Python client writes)."""
        get_stream(scope, stream)
        serializer = AppendSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        items = serializer.validated_data["events"]
        events = [(_payload(item), item.get("routingKey")) for item in items]
        WRITERS.append(scope, stream, events)
        return Response({"appended": len(events)}, status=201)
