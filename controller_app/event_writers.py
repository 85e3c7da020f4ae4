"""The controller's own event writers: events appended by the controller process itself.

Responsibility: one ``AsyncEventWriter`` per stream per process, on a private event loop
thread, the Python client's writer with its routing keys, append blocks, idempotent writer ids
and re-routing when a segment is sealed; it asks the controller's own tables
(``LocalController``) instead of the REST API. The REST API's appends
(``controller_app.api.events``) and the canary (``controller_app.operations.canary``) write
through ``WRITERS``.

A batch waits for its events to be durable for ``APPEND_TIMEOUT_SECONDS``: long enough to ride
through a segment store restart, short enough for HTTP clients' own timeouts. After it the
answer is 503 ``segment-store-timeout``: the events not yet sent are given up (never written
later); any sent before the segment store went quiet may have been written.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections

from controller_app import selectors as sel
from controller_app.access.tokens import delegation_token
from controller_app.errors import Tier1UnavailableError
from controller_app.workflows import marks
from controller_app.workflows.common import get_stream
from millrace.client.routing import SegmentWithRange
from millrace.client.writer import AsyncEventWriter
from millrace.kernel.claims import READ_UPDATE, stream_resource
from millrace.kernel.tls import peer_context

__all__ = ["APPEND_TIMEOUT_SECONDS", "WRITERS", "LocalController"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

APPEND_TIMEOUT_SECONDS = 15.0


def _in_thread(function: Callable[_P, _T]) -> Callable[_P, Awaitable[_T]]:
    """Run ``function`` in a worker thread and close that thread's database connections after
    it (the writer asks rarely: at start and after a scale; an idle connection left open
    would hold the database, e.g. against a test database's teardown)."""

    def closing(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return function(*args, **kwargs)
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
