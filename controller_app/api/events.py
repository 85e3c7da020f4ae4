"""REST append and read for HTTP clients.

Read: ``GET /v1/scopes/{scope}/streams/{stream}/events?from=head|tail|time:<ms>|<cut>&limit=N``
gives a page of events and a ``continuation`` (a stream cut text) to pass for the next page
(``controller_app.stream_reads``).

Append: events with routing keys, written by the Python client's writer.

``POST /v1/scopes/{scope}/streams/{stream}/events`` takes a batch of events and answers once
all of them are durable. The events go through the same ``AsyncEventWriter`` as the Python
client (routing keys, append blocks, idempotent writer ids, re-routing when a segment is
sealed); here the writer asks the controller's own tables instead of the REST API
(``LocalController``). One writer per stream per process lives on a private event loop thread.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import threading
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controller_app import selectors as sel
from controller_app.api import fields
from controller_app.errors import InvalidArgumentError, Tier1UnavailableError
from controller_app.registry.decoding import DECODINGS, EventDecoder
from controller_app.segment_client import segment_store
from controller_app.stream_reads import read_page, start_cut
from controller_app.tokens import delegation_token
from controller_app.workflows import marks
from controller_app.workflows.common import get_stream
from millrace.client.events import EVENT_BYTES_MAX
from millrace.client.routing import SegmentWithRange
from millrace.client.streamcut import StreamCut
from millrace.client.writer import AsyncEventWriter
from millrace.kernel.claims import READ_UPDATE, stream_resource
from millrace.kernel.tls import peer_context

#: Events one request may carry, and how long it waits for them to be durable: long enough to
#: ride through a segment store restart, short enough for HTTP clients' own timeouts. After it
#: the answer is 503 ``segment-store-timeout``: the events not yet sent are given up (never
#: written later); any sent before the segment store went quiet may have been written.
EVENTS_PER_REQUEST_MAX = 10_000
APPEND_TIMEOUT_SECONDS = 15.0


def _in_thread(function: Any) -> Any:
    """Run ``function`` in a worker thread and close that thread's database connections after
    it (the writer asks rarely: at start and after a scale; an idle connection left open
    would hold the database, e.g. against a test database's teardown)."""

    def closing(*args: Any) -> Any:
        try:
            return function(*args)
        finally:
            connections.close_all()

    return sync_to_async(closing, thread_sensitive=False)


class LocalController:
    """What ``AsyncEventWriter`` asks of the controller, answered from this node's tables."""

    def __init__(self) -> None:
        #: TLS to the segment store nodes: this process's (``MILLRACE_TLS_*``).
        self.tls = peer_context(settings.MILLRACE_TLS)

    async def delegation_token(self, scope: str, stream: str) -> str:
        resource = stream_resource(scope, stream)
        return await _in_thread(delegation_token)(resource, READ_UPDATE)

    async def current_segments(self, scope: str, stream: str) -> list[SegmentWithRange]:
        def read() -> list[SegmentWithRange]:
            row = get_stream(scope, stream)
            return [_range(row, s) for s in sel.current_segments(row)]

        return await _in_thread(read)()

    async def successors(
        self, scope: str, stream: str, segment_id: int
    ) -> list[tuple[SegmentWithRange, list[int]]]:
        def read() -> list[tuple[SegmentWithRange, list[int]]]:
            row = get_stream(scope, stream)
            return [(_range(row, s), p) for s, p in sel.successors(row, segment_id).items()]

        return await _in_thread(read)()

    async def stream_config(self, scope: str, stream: str) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            row = get_stream(scope, stream)
            return {"timestampAggregationTimeout": row.timestamp_aggregation_timeout}

        return await _in_thread(read)()

    async def note_writer_mark(
        self, scope: str, stream: str, writer_id: str, timestamp: int, position: dict[int, int]
    ) -> None:
        await _in_thread(marks.note_writer_mark)(scope, stream, writer_id, timestamp, position)

    async def segment_uri(self, scope: str, stream: str, segment_id: int) -> tuple[str, int]:
        def read() -> tuple[str, int]:
            uri = sel.segment_uri(get_stream(scope, stream), segment_id)
            return uri.host, uri.port

        return await _in_thread(read)()


def _range(stream: Any, segment: Any) -> SegmentWithRange:
    return SegmentWithRange(
        segment.id, sel.segment_name(stream, segment.id), segment.key_start, segment.key_end
    )


class _Writers:
    """One writer per stream, on one event loop thread per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writers: dict[tuple[str, str], AsyncEventWriter] = {}

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._loop.run_forever, daemon=True, name="millrace-rest-append"
                ).start()
            return self._loop

    def append(self, scope: str, stream: str, events: list[tuple[bytes, str | None]]) -> None:
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(self._append(scope, stream, events), loop)
        try:
            future.result(APPEND_TIMEOUT_SECONDS)
        except TimeoutError:
            writer = self._writers.get((scope, stream))
            why = writer.refusal() if writer is not None else None
            # Give the events up rather than deliver them after the 503: a client that sends
            # them again would have them twice. Only what was sent before may have landed.
            gone = asyncio.run_coroutine_threadsafe(self._abandon(scope, stream), loop)
            with contextlib.suppress(Exception):
                gone.result(APPEND_TIMEOUT_SECONDS)
            if why is not None:  # refused all along, not slow: say why
                raise Tier1UnavailableError(f"the segment store refuses appends: {why}") from None
            raise

    async def _abandon(self, scope: str, stream: str) -> None:
        writer = self._writers.pop((scope, stream), None)
        if writer is not None:
            await writer.abandon(TimeoutError("given up after the append timeout"))

    async def _append(
        self, scope: str, stream: str, events: list[tuple[bytes, str | None]]
    ) -> None:
        writer = self._writers.get((scope, stream))
        if writer is None:
            writer = AsyncEventWriter(LocalController(), scope, stream)  # type: ignore[arg-type]
            self._writers[(scope, stream)] = writer
        try:
            done = [await writer.write_event(data, key) for data, key in events]
            await writer.flush_events(done)
        except Exception:
            # Start afresh next time (the stream may have been sealed, deleted or recreated),
            # unless a later request already did.
            if self._writers.get((scope, stream)) is writer:
                del self._writers[(scope, stream)]
            raise


WRITERS = _Writers()


class EventSerializer(serializers.Serializer):
    data = fields.CharField(required=False, allow_blank=True, help_text="UTF-8 text")
    dataBase64 = fields.CharField(required=False, help_text="bytes, base64")
    routingKey = fields.CharField(required=False, allow_null=True, max_length=1024)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("data" in attrs) == ("dataBase64" in attrs):
            raise serializers.ValidationError("give exactly one of data and dataBase64")
        return attrs


class AppendSerializer(serializers.Serializer):
    events = EventSerializer(many=True, allow_empty=False, max_length=EVENTS_PER_REQUEST_MAX)


class AppendedSerializer(serializers.Serializer):
    appended = serializers.IntegerField()


def _payload(item: dict[str, Any]) -> bytes:
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
