"""WebSocket tail reads: subscribe to a stream or a segment; events are pushed as they arrive.

Responsibility: the Channels consumers behind ``/ws/streams/<scope>/<stream>`` and
``/ws/segments/<qualified segment name>``. A subscriber names where to start in the query
string; the consumer reads the segments from the segment store (tail reads wait there for new
data) and sends the events in JSON batches. Across scaling, a successor segment is read only
once all its predecessors are read to their end, so events of one routing key arrive in the
order they were written. A sealed stream ends the subscription with an ``end`` message.

Flow control: each segment's reader sends a batch and waits until the WebSocket has taken it
before it reads more, so a slow subscriber slows its readers down and no buffer grows.

Messages (server → client, JSON text):
  ``{"type": "subscribed", "stream": "sc/st", "position": {"<segment id>": offset, ...}}``
  ``{"type": "events", "segment": "<qualified name>", "segmentId": id,
    "events": [{"offset": o, "data": "<base64>"} | {"offset": o, "text": "..."}], "next": o}``
  ``{"type": "position", "position": {"<segment id>": offset, ...}}``  (a segment was read to
    its end: the segments read from now on; with the ``next`` of later events, where a dropped
    subscriber resumes with ``from=position:<id>=<offset>,...``, nothing lost or repeated)
  ``{"type": "truncated", "segment": ..., "startOffset": o}``  (data skipped: it was deleted)
  ``{"type": "watermark", "number": n, "lowerTimeBound": ms, "upperTimeBound": ms,
  "streamCut": {"<segment id>": offset, ...}}``  (stream subscriptions: the stream's newest
  watermark, at subscription and each time it moves)
  ``{"type": "end"}``  (the stream or segment is sealed and was read to its end)
  ``{"type": "error", "code": "...", "message": "..."}``  (then close, except for bad input)
Client → server: ``{"type": "ping"}`` (answered ``{"type": "pong"}``); anything else gets an
``error`` with code ``bad-message`` and the subscription goes on.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import InterfaceError, OperationalError

from controller_app.access.tokens import delegation_token
from controller_app.errors import (
    NoNodeForSegmentError,
    PermissionRefusedError,
    StreamNotFoundError,
)
from controller_app.registry.decoding import DECODINGS, EventDecoder
from controller_app.tails import streams
from controller_app.tails.auth import CLOSE_TRY_AGAIN
from millrace.client.events import Event, EventFormatError
from millrace.client.follower import StreamFollower, Target
from millrace.client.transport import segment_store as ssc
from millrace.client.transport.pool import SegmentStorePool
from millrace.kernel.claims import READ, stream_resource
from millrace.kernel.naming import parse_segment_name
from millrace.kernel.tls import peer_context

#: Seconds between two looks at a stream's newest watermark (per stream, shared by the
#: process's subscriptions of it: ``_WATERMARKS``).
WATERMARK_POLL_SECONDS = 1.0
_WATERMARKS: dict[tuple[str, str], tuple[float, dict[str, Any] | None]] = {}
_WATERMARKS_KEPT = 10_000

#: The most a message of events takes (its JSON), below the 1 MiB a WebSocket client takes in
#: one message by default (Python's ``websockets``); an event larger than ``PART_BYTES`` is
#: sent in parts of that many bytes (base64: 512 KiB a message).
MESSAGE_BYTES_MAX = 768 * 1024
PART_BYTES = 384 * 1024
#: Seconds between two tries of a subscription waiting for the metadata database.
DATABASE_RETRY_SECONDS = 1.0
#: The longest query string a subscription takes, and the largest segment id or offset.
QUERY_BYTES_MAX = 8192
INT64_MAX = 2**63 - 1

log = logging.getLogger(__name__)

CLOSE_BAD_REQUEST, CLOSE_UNAUTHENTICATED, CLOSE_NOT_FOUND, CLOSE_FAILED = 4400, 4401, 4404, 4500
CLOSE_FORBIDDEN = 4403


class SubscriptionError(Exception):
    """A subscription that cannot start: ``code`` and ``close_code`` say why."""

    def __init__(self, code: str, message: str, close_code: int = CLOSE_BAD_REQUEST) -> None:
        super().__init__(message)
        self.code = code
        self.close_code = close_code


def read_token(resource: str) -> str:
    """A delegation token for reading ``resource`` (empty when authentication is off)."""
    return delegation_token(resource, READ)  # MILLRACE_TOKEN_TTL_SECONDS; renewed on expiry


class TailConsumer(AsyncWebsocketConsumer):
    """What the stream and segment consumers share: auth, messages, segment reads; they ask
    the controller about streams through ``controller_app.tails.streams``."""

    encoding = "base64"
    #: Events also decoded by their schema ids (``decode=json``), else None.
    decoder: EventDecoder | None = None
    #: A tail is sent nothing through the channel layer, so it takes none: an alias that is
    #: not configured gives none (``channels.layers.get_channel_layer``). With Redis as the
    #: layer, each consumer would otherwise hold a blocking pop on Redis for nothing, and
    #: drop with it when Redis times out or goes away.
    channel_layer_alias = "none: tails use no channel layer"

    async def connect(self) -> None:
        #: Segment id -> next offset of each segment being read (what a resume starts from).
        self.reading: dict[int, int] = {}
        await self.accept()
        self.pool = SegmentStorePool(request_timeout=60.0, ssl=peer_context(settings.MILLRACE_TLS))
        self.send_lock = asyncio.Lock()
        self.runner: asyncio.Task[Any] | None = None
        try:
            await database_sync_to_async(self._check_user)()
            self.params = _params(self.scope.get("query_string", b""))
            self.encoding = self.params.get("encoding", "base64")
            if self.encoding not in ("base64", "utf-8"):
                raise SubscriptionError("bad-request", "encoding must be base64 or utf-8")
            decode = self.params.get("decode", "")
            if decode and decode not in DECODINGS:
                raise SubscriptionError("bad-request", f"decode must be one of {DECODINGS}")
            self.decoder = EventDecoder() if decode else None
            await self.subscribe()
        except SubscriptionError as exc:
            await self.fail(exc.code, str(exc), exc.close_code)
            return
        except (OperationalError, InterfaceError):
            message = "the metadata database is not answering; subscribe again shortly"
            await self.fail("database-unavailable", message, CLOSE_TRY_AGAIN)
            return
        self.runner = asyncio.create_task(self._run_guarded())

    def _check_user(self) -> None:
        user = self.scope.get("user")
        if settings.MILLRACE.auth_enabled and not (user and user.is_authenticated):
            raise SubscriptionError(
                "not-authenticated",
                "credentials required: a session, an Authorization header "
                "'Token <key>' or the query parameter token=<key>",
                CLOSE_UNAUTHENTICATED,
            )
        kwargs = self.scope["url_route"]["kwargs"]
        try:
            scope, stream = kwargs["scope"], kwargs["stream"]
        except KeyError:
            try:
                scope, stream, _ = parse_segment_name(kwargs.get("segment", ""))
            except ValueError:
                return  # (the subscription answers the bad name)
        try:
            streams.may_read(user, scope, stream)
        except PermissionRefusedError as exc:
            raise SubscriptionError("permission-denied", str(exc), CLOSE_FORBIDDEN) from None

    async def subscribe(self) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        raise NotImplementedError

    async def _run_guarded(self) -> None:
        try:
            await self.run()
        except asyncio.CancelledError:
            raise
        except SubscriptionError as exc:
            await self.fail(exc.code, str(exc), exc.close_code)
        except Exception as exc:  # a bug or a lost store: tell the client, never hang
            log.exception("tail read failed")
            await self.fail("internal-error", f"{type(exc).__name__}: {exc}", CLOSE_FAILED)

    async def disconnect(self, code: int) -> None:
        # The reading stops first: a segment read that saw its connection close would open a
        # new one (it reconnects), which nobody would close (a connection leaked per subscriber).
        runner = getattr(self, "runner", None)
        if runner is not None:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        if hasattr(self, "pool"):
            await self.pool.close()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            message = json.loads(text_data) if text_data is not None else None
        except ValueError:
            message = None
        if isinstance(message, dict) and message.get("type") == "ping":
            await self.emit({"type": "pong"})
            return
        await self.emit(
            {
                "type": "error",
                "code": "bad-message",
                "message": 'the only message is {"type": "ping"}',
            }
        )

    async def emit(self, message: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.send(text_data=json.dumps(message, separators=(",", ":")))

    async def fail(self, code: str, message: str, close_code: int) -> None:
        with contextlib.suppress(Exception):
            await self.emit({"type": "error", "code": code, "message": message})
            await self.close(code=close_code)

    # -- reading -----------------------------------------------------------------------------

    def follower(self, successors: Any = None, on_moved: Any = None) -> StreamFollower:
        return StreamFollower(
            self.pool, self.token, self._emit_events, successors=successors,
            on_truncated=self._truncated, token_refresh=self._new_token, on_moved=on_moved,
            locate=self._locate,
        )  # fmt: skip

    async def _locate(self, name: str) -> tuple[str, int]:
        """Where segment ``name`` is served now (its container may have moved)."""
        target = await database_sync_to_async(streams.segment_target)(name)
        return target.host, target.port

    async def _new_token(self) -> str:
        """A new read token when the one in use has expired (a subscription outlives it)."""
        self.token = read_token(self.token_resource)
        return self.token

    async def _emit_events(self, target: Target, events: list[Event], next_offset: int) -> None:
        self.reading[target.segment_id] = next_offset
        if self.decoder is not None:  # the schemas of these events, looked up once
            await database_sync_to_async(self.decoder.load)([e.data for e in events])
        for message in self._messages(target, events, next_offset):
            await self.emit(message)

    async def _truncated(self, target: Target, start_offset: int) -> None:
        await self.emit({"type": "truncated", "segment": target.name, "startOffset": start_offset})

    async def follow(self, run: Any) -> None:
        try:
            await run
        except EventFormatError as exc:
            raise SubscriptionError("not-events", str(exc), CLOSE_FAILED) from exc

    def _messages(
        self, target: Target, events: list[Event], next_offset: int
    ) -> Iterator[dict[str, Any]]:
        """The ``events`` messages of a read: as many events each as fit in
        ``MESSAGE_BYTES_MAX``, and an event too large for one message in parts of
        ``PART_BYTES`` (base64), each in a message of its own. A message's ``next`` is where
        a resume starts: the offset after its last whole event."""
        items: list[dict[str, Any]] = []
        size = 0
        for event in events:
            item = self._item(event) if len(event.data) <= PART_BYTES else None
            item_size = _encoded_size(item) if item is not None else 0
            if item is None or item_size > MESSAGE_BYTES_MAX:  # (text escaped to over it)
                if items:
                    yield self._events(target, items, event.offset)
                    items, size = [], 0
                yield from self._parts(target, event)
                continue
            if items and size + item_size > MESSAGE_BYTES_MAX:
                yield self._events(target, items, event.offset)
                items, size = [], 0
            items.append(item)
            size += item_size
        if items or not events:
            yield self._events(target, items, next_offset)

    def _parts(self, target: Target, event: Event) -> Iterator[dict[str, Any]]:
        data, count = event.data, -(-len(event.data) // PART_BYTES)
        for number in range(count):
            piece = data[number * PART_BYTES : (number + 1) * PART_BYTES]
            item = {"offset": event.offset, "size": len(data), "part": number, "parts": count,
                    "data": base64.b64encode(piece).decode("ascii")}  # fmt: skip
            last = number == count - 1
            yield self._events(target, [item], event.next_offset if last else event.offset)

    def _item(self, event: Event) -> dict[str, Any]:
        item = self._plain_item(event)
        if self.decoder is not None:
            item.update(self.decoder.decoded(event.data))
        return item

    def _plain_item(self, event: Event) -> dict[str, Any]:
        if self.encoding == "utf-8":
            try:
                return {"offset": event.offset, "text": event.data.decode("utf-8")}
            except UnicodeDecodeError:
                pass
        return {"offset": event.offset, "data": base64.b64encode(event.data).decode("ascii")}

    @staticmethod
    def _events(target: Target, items: list[dict[str, Any]], next_offset: int) -> dict[str, Any]:
        return {
            "type": "events",
            "segment": target.name,
            "segmentId": target.segment_id,
            "events": items,
            "next": next_offset,
        }


def _encoded_size(item: dict[str, Any]) -> int:
    """About the bytes ``item`` takes in a message's JSON: exact for base64; for text, its
    length, or its escaped length where escaping may count (``MESSAGE_BYTES_MAX`` is kept
    well below the clients' limit for the rest); a decoded one measured."""
    if "schemaId" in item or "decodeError" in item:
        return len(json.dumps(item)) + 32
    if "text" not in item:
        return len(item["data"]) + 32
    text = item["text"]
    return (len(json.dumps(text)) if len(text) > 4096 else 6 * len(text)) + 32


class StreamTailConsumer(TailConsumer):
    """``/ws/streams/<scope>/<stream>?from=head|tail|time:<ms>|cut:<id>=<offset>,...`` or
    ``from=position:<id>=<offset>,...`` (resume where a dropped subscription was: the segments
    of its last ``position`` message at the ``next`` offsets of the events it received)."""

    async def subscribe(self) -> None:
        kwargs = self.scope["url_route"]["kwargs"]
        self.scope_name, self.stream_name = kwargs["scope"], kwargs["stream"]
        self.token_resource = f"{self.scope_name}/{self.stream_name}/"
        self.token = read_token(self.token_resource)
        start = self.params.get("from", "tail")
        self.position = await database_sync_to_async(self._start_position)(start)
        if start == "tail":
            self.position = await self._tail_offsets(self.position)
        self.reading = {target.segment_id: offset for target, offset in self.position.items()}
        await self.emit(
            {
                "type": "subscribed",
                "stream": f"{self.scope_name}/{self.stream_name}",
                "position": {str(t.segment_id): o for t, o in self.position.items()},
            }
        )

    def _start_position(self, start: str) -> dict[Target, int]:
        kind, _, value = start.partition(":")
        parsed: object = value
        try:
            if kind in ("head", "tail") and not value:
                parsed = None
            elif kind == "time":
                parsed = _int64(value, "time")
            elif kind in ("cut", "position"):
                parsed = _parse_cut(value, allow_empty=kind == "position")
            else:
                raise SubscriptionError(
                    "bad-request",
                    "from must be head, tail, time:<ms>, cut:<id>=<offset>,... "
                    "or position:<id>=<offset>,...",
                )
            return streams.start_position(self.scope_name, self.stream_name, kind, parsed)
        except StreamNotFoundError as exc:
            raise SubscriptionError("not-found", str(exc), CLOSE_NOT_FOUND) from None
        except ValueError as exc:
            raise SubscriptionError("bad-request", str(exc)) from exc

    async def _tail_offsets(self, position: dict[Target, int]) -> dict[Target, int]:
        tail = {}
        for target in position:
            client = await self.pool.get(target.host, target.port)
            info = await client.get_info(target.name, token=self.token)
            tail[target] = info.write_offset
        return tail

    async def run(self) -> None:
        watcher = asyncio.get_running_loop().create_task(self._watch_watermarks())
        try:
            await self.follow(self.follower(self._successors, self._moved).run(self.position))
        finally:
            watcher.cancel()
        await self.emit({"type": "end"})
        await self.close()

    async def _watch_watermarks(self) -> None:
        """Send the stream's watermark each time a newer one appears (polled every
        ``WATERMARK_POLL_SECONDS``)."""
        seen = 0
        while True:
            newest = await self._newest_watermark()
            if newest is not None and int(newest["number"]) > seen:
                seen = int(newest["number"])
                await self.emit({"type": "watermark", **newest})
            await asyncio.sleep(WATERMARK_POLL_SECONDS)

    async def _newest_watermark(self) -> dict[str, Any] | None:
        """The stream's newest watermark, asked of the controller at most once per
        ``WATERMARK_POLL_SECONDS`` per stream and process, whatever the number of
        subscribers."""
        key = (self.scope_name, self.stream_name)
        now = time.monotonic()
        cached = _WATERMARKS.get(key)
        if cached is not None and now - cached[0] < WATERMARK_POLL_SECONDS:
            return cached[1]
        try:
            newest = await database_sync_to_async(streams.watermark)(*key)
        except (OperationalError, InterfaceError):  # the database is away: none for now
            return cached[1] if cached is not None else None
        _WATERMARKS[key] = (time.monotonic(), newest)
        if len(_WATERMARKS) > _WATERMARKS_KEPT:  # forget the stalest (streams gone quiet)
            del _WATERMARKS[min(_WATERMARKS, key=lambda k: _WATERMARKS[k][0])]
        return newest

    async def _moved(self, ended: Target, started: list[Target]) -> None:
        """A segment was read to its end: tell the subscriber the segments it now reads."""
        self.reading.pop(ended.segment_id, None)
        self.reading.update((target.segment_id, 0) for target in started)
        position = {str(segment_id): offset for segment_id, offset in self.reading.items()}
        await self.emit({"type": "position", "position": position})

    async def _successors(self, segment_id: int) -> tuple[dict[Target, list[int]], bool]:
        """The successors of a segment read to its end, and whether the stream has ended.
        While the metadata database is away the subscription waits for it (asking every
        ``DATABASE_RETRY_SECONDS``), then goes on."""
        while True:
            try:
                return await database_sync_to_async(streams.successors)(
                    self.scope_name, self.stream_name, segment_id
                )
            except (OperationalError, InterfaceError):
                await asyncio.sleep(DATABASE_RETRY_SECONDS)


class SegmentTailConsumer(TailConsumer):
    """``/ws/segments/<qualified segment name>?offset=<n>|head|tail``: one segment.

    The name's ``#`` characters must be sent percent-encoded (``%23``), as in
    ``/ws/segments/sc/st/0.%23epoch.0``: a raw ``#`` starts a URL fragment.
    """

    async def subscribe(self) -> None:
        name = self.scope["url_route"]["kwargs"]["segment"]
        try:
            scope, stream, _ = parse_segment_name(name)
            self.target = await database_sync_to_async(streams.segment_target)(name)
        except ValueError as exc:
            raise SubscriptionError("bad-request", str(exc)) from exc
        except NoNodeForSegmentError as exc:
            raise SubscriptionError("no-node", str(exc), CLOSE_FAILED) from exc
        self.token_resource = stream_resource(scope, stream)
        self.token = read_token(self.token_resource)
        start = self.params.get("offset", "head")
        client = await self.pool.get(self.target.host, self.target.port)
        try:
            info = await client.get_info(name, token=self.token)
        except ssc.SegmentNotFoundError:
            info = None
        if info is None or not info.exists:
            raise SubscriptionError("not-found", f"segment {name} does not exist", CLOSE_NOT_FOUND)
        if start == "head":
            self.offset = info.start_offset
        elif start == "tail":
            self.offset = info.write_offset
        else:
            try:
                self.offset = _int64(start, "offset (or head, tail)")
            except ValueError as exc:
                raise SubscriptionError("bad-request", str(exc)) from None
        await self.emit({"type": "subscribed", "segment": name, "offset": self.offset})

    async def run(self) -> None:
        await self.follow(self.follower().read_segment(self.target, self.offset))
        await self.emit({"type": "end"})
        await self.close()


def _params(query_string: bytes) -> dict[str, str]:
    """The query's parameters (the last of each name); ``SubscriptionError`` for one too long."""
    if len(query_string) > QUERY_BYTES_MAX:
        raise SubscriptionError(
            "bad-request", f"the query string is {len(query_string)} bytes, over {QUERY_BYTES_MAX}"
        )
    query = parse_qs(query_string.decode("latin-1"))
    return {key: values[-1] for key, values in query.items()}


def _int64(text: str, what: str) -> int:
    """``text`` as a number from 0 to 2**63-1 (ValueError naming ``what`` otherwise)."""
    if not text.isascii() or not text.isdigit() or int(text) > INT64_MAX:
        raise ValueError(f"{what} must be a whole number from 0 to {INT64_MAX}, not {text[:40]!r}")
    return int(text)


def _parse_cut(text: str, allow_empty: bool = False) -> dict[int, int]:
    """``<segment id>=<offset>,...`` as a dict (ValueError on anything else)."""
    cut = {}
    for part in filter(None, text.split(",")):
        segment, _, offset = part.partition("=")
        cut[_int64(segment, "a segment id")] = _int64(offset, "an offset")
    if not cut and not allow_empty:
        raise ValueError("a stream cut names at least one segment")
    return cut
