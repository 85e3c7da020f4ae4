"""One client connection of the wire server: framing, dispatch, and the pipelined append path.

Responsibility: read frames straight into reusable buffers (``asyncio.BufferedProtocol``), decode
them, and answer each one:

* Hello is answered with Hello(17, 5); a client whose version range excludes 17..5 is
  disconnected after the answer, as Pravega does. KeepAlive is answered with KeepAlive at once
  (the clients' liveness watch: a node that stops answering is left behind).
* SetupAppend binds a writer id to a segment on this connection (after the token check);
  AppendBlockEnd, ConditionalBlockEnd and ConditionalAppend of that writer are collected while
  one received buffer is decoded and handed to ``store.append_group_nowait`` together at its end
  (one durable log group and one future per container, not one per block), without awaiting,
  so many blocks are in flight while reading goes on. A plain AppendBlockEnd (well formed, of a
  writer set up here, passing the block checks) is read straight from its payload without being
  decoded into a command, and answered with a DataAppended encoded from plain values; anything
  else takes the generic path. Each block is acknowledged (DataAppended) only once it is
  durable in tier-1; replies per writer are sent in the order the blocks arrived. After an
  append of a writer fails, later blocks of that writer on this connection are refused with the
  same error (never appended past a gap) until a new SetupAppend.
* Other requests run as tasks (a tail read may wait), each answered with its request id; those
  with an immediate handler (table updates) are checked and queued at once, and answered from
  their outcome's done-callback, without a task of their own.
* A frame that cannot be decoded is answered with ErrorMessage when its request id is readable;
  otherwise (bad length, unknown type, undecodable append) the connection is closed. Either way
  the server and its other connections carry on.

Back-pressure: reading pauses while the transport's write buffer is full or more than
``appends_in_flight_max`` appends (or ``append_bytes_in_flight_max`` bytes of them) or
``requests_in_flight_max`` requests (tasks and immediate ones) are pending.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from millrace.kernel import wire as wire
from millrace.kernel.claims import READ_UPDATE, AuthError
from millrace.kernel.wire.fastpath import (
    APPEND_BLOCK_END_DATA_START,
    data_appended_frame,
    split_append_block_end,
)
from segment_app.engine.api import AppendItem
from segment_app.engine.errors import (
    BadEventNumberError,
    BadOffsetError,
    ContainerOfflineError,
    InvalidArgumentError,
)
from segment_app.server.replies import reply_for_error

if TYPE_CHECKING:
    from segment_app.server.server import SegmentStoreServer

__all__ = ["WireConnection"]

log = logging.getLogger(__name__)

#: Block data at least this long is handed on as a view of the received frame, shorter data as
#: a copy (cheaper than a view to make, and not tracked by the garbage collector).
_VIEW_BYTES_MIN = 4096


@dataclasses.dataclass(slots=True)
class _PendingAppend(AppendItem):
    """A block waiting for its reply; the store fills in ``result`` or ``error``."""

    request_id: int = 0
    conditional: bool = False
    size: int = 0
    writer: _Writer | None = None
    #: Its outcome (``result`` or ``error``) is final.
    done: bool = False


@dataclasses.dataclass(slots=True)
class _Writer:
    """An append session: a writer id bound to a segment on one connection."""

    segment: str
    writer_id: uuid.UUID
    #: ``writer_id`` as its 16 wire bytes (how plain blocks find their writer, and replies
    #: name it).
    raw: bytes
    pending: collections.deque[_PendingAppend] = dataclasses.field(
        default_factory=collections.deque
    )
    last_event_number: int = wire.NO_EVENT_NUMBER
    failure: BaseException | None = None


#: The first byte of a TLS record that opens a handshake (a ClientHello).
_TLS_HANDSHAKE = 0x16


class WireConnection(asyncio.BufferedProtocol):
    def __init__(self, server: SegmentStoreServer) -> None:
        self.server = server
        self.config = server.config
        self.store = server.store
        self.requests = server.requests
        self.assembler = wire.FrameAssembler(buffer_bytes=self.config.receive_buffer_bytes)
        #: Where the connection's first bytes land, until they are looked at (``_tls_hello``).
        self._first: memoryview | None = None
        self._greeted = False
        self.transport: asyncio.Transport | None = None
        self.writers: dict[uuid.UUID, _Writer] = {}
        #: The same writers by the 16 bytes of their id.
        self._writers_by_raw: dict[bytes, _Writer] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        #: Requests answered without a task (``_request_now``) and not answered yet.
        self.immediate_in_flight = 0
        self.appends_in_flight = 0
        self.append_bytes_in_flight = 0
        self.closed = False
        self._write_paused = False
        self._reading_paused = False
        #: Encoded replies not yet handed to the transport (sent together, see ``send``).
        self._out: list[bytes | bytearray | memoryview] = []
        self._out_scheduled = False
        #: Appends of the buffer being decoded, handed to the store together at its end.
        self._batch: list[_PendingAppend] = []
        self._traffic = server.traffic.record if self.config.traffic_monitor else None
        self._sync_handlers: dict[int, Callable[[Any], None]] = {
            wire.Hello.TYPE: self._hello,
            wire.KeepAlive.TYPE: self.send,  # (answered in kind: see the module's docstring)
            wire.Padding.TYPE: _ignore,
            wire.AppendBlockEnd.TYPE: self._append_block_end,
            wire.ConditionalBlockEnd.TYPE: self._conditional_block_end,
            wire.ConditionalAppend.TYPE: self._conditional_append,
        }

    # -- asyncio protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        for task in self.tasks:
            task.cancel()

    def get_buffer(self, sizehint: int) -> memoryview:
        buffer = self.assembler.get_buffer()
        if not self._greeted:
            self._first = buffer
        return buffer

    def buffer_updated(self, nbytes: int) -> None:
        if not self._greeted and self._tls_hello(nbytes):
            return
        try:
            frames = self.assembler.buffer_updated(nbytes)
        except wire.FramingError as exc:
            self.fail(str(exc))
            return
        plain = wire.AppendBlockEnd.TYPE
        for type_code, payload in frames:
            if self.closed:
                break
            if type_code != plain or not self._plain_block(payload):
                self._on_frame(type_code, payload)
        if self._batch:
            self._submit_batch()

    def eof_received(self) -> bool:
        return False

    def _tls_hello(self, nbytes: int) -> bool:
        """Whether the first bytes are a TLS ClientHello on this plaintext port (a TLS client
        that has the wrong port, or expects TLS here): it is closed at once, so the client's
        handshake fails now (``does not speak TLS``) instead of waiting for its timeout."""
        self._greeted = True
        first, self._first = self._first, None
        if first is None or nbytes < 2 or first[0] != _TLS_HANDSHAKE or first[1] != 3:
            return False
        if self.transport is not None and self.transport.get_extra_info("sslcontext") is None:
            peer = self.transport.get_extra_info("peername")
            log.warning("a TLS client (%s) on the plaintext wire port: closed", peer)
            self.closed = True
            self.transport.abort()
            return True
        return False

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # -- sending and closing --------------------------------------------------------------------

    def send(self, cmd: Any) -> None:
        """Queue a reply; the replies queued during one event-loop turn (e.g. the DataAppended
        of every block one data frame made durable) go out in one write (one syscall)."""
        if self.closed or self.transport is None:
            return
        try:
            parts = wire.encode_parts(cmd)
        except wire.ProtocolError:
            log.exception("cannot encode reply %r", type(cmd).__name__)
            self.fail("reply could not be encoded")
            return
        self._out.extend(parts)
        if not self._out_scheduled:
            self._out_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_out)

    def _flush_out(self) -> None:
        self._out_scheduled = False
        out, self._out = self._out, []
        if out and not self.closed and self.transport is not None:
            self.transport.writelines(out)

    def fail(self, message: str) -> None:
        """Give up on this connection: say why (request id -1), then close it."""
        if self.closed:
            return
        log.info("closing connection %s: %s", self._peer(), message)
        self.send(wire.ErrorMessage(wire.NO_REQUEST_ID, "", message, wire.ERROR_ILLEGAL_ARGUMENT))
        self.close()

    def close(self) -> None:
        self._flush_out()  # queued replies go out before the transport closes
        if self.transport is not None:
            self.transport.close()
        self.closed = True

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self.closed = True

    def _peer(self) -> object:
        return self.transport.get_extra_info("peername") if self.transport else None

    def _update_reading(self) -> None:
        if self.closed or self.transport is None:
            return
        pause = (
            self._write_paused
            or self.appends_in_flight >= self.config.appends_in_flight_max
            or self.append_bytes_in_flight >= self.config.append_bytes_in_flight_max
            or len(self.tasks) + self.immediate_in_flight >= self.config.requests_in_flight_max
        )
        if pause != self._reading_paused:
            self._reading_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    # -- dispatch -------------------------------------------------------------------------------

    def _on_frame(self, type_code: int, payload: bytes | memoryview) -> None:
        try:
            cmd = wire.decode_frame(type_code, payload)
        except wire.ProtocolError as exc:
            self._malformed(type_code, payload, exc)
            return
        handler = self._sync_handlers.get(type_code)
        if handler is not None:
            handler(cmd)
        elif type_code == wire.SetupAppend.TYPE:
            self._spawn(self._setup_append(cmd))
        elif type_code in self.requests.immediate:
            self._request_now(type_code, cmd)
        elif type_code in self.requests.handlers:
            self._spawn(self._request(type_code, cmd))
        else:
            self._unsupported(cmd)

    def _malformed(self, type_code: int, payload: bytes | memoryview, exc: Exception) -> None:
        request_id = wire.request_id_of(type_code, payload)
        if request_id is None or isinstance(exc, wire.UnknownCommandError):
            self.fail(str(exc))
        else:
            self.send(wire.ErrorMessage(request_id, "", str(exc), wire.ERROR_ILLEGAL_ARGUMENT))

    def _unsupported(self, cmd: Any) -> None:
        name = type(cmd).__name__
        request_id = getattr(cmd, "request_id", wire.NO_REQUEST_ID)
        self.send(wire.OperationUnsupported(request_id, name, f"{name} is not supported"))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        self._update_reading()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._update_reading()

    async def _request(self, type_code: int, cmd: Any) -> None:
        try:
            reply = await self.requests.handlers[type_code](cmd)
        except Exception as exc:
            reply = _error_reply(exc, cmd)
        self.send(reply)

    def _request_now(self, type_code: int, cmd: Any) -> None:
        """Answer a request without a task (``RequestHandlers.immediate``), or with one when
        its handler cannot."""
        try:
            pending = self.requests.immediate[type_code](cmd)
        except Exception as exc:
            self.send(_error_reply(exc, cmd))
            return
        if pending is None:
            self._spawn(self._request(type_code, cmd))
            return
        outcome, reply_of = pending
        self.immediate_in_flight += 1
        if outcome.done():  # answered already (a read of a table's index): out with this turn's
            self._answer(cmd, reply_of, outcome, flush=False)
            return
        outcome.add_done_callback(functools.partial(self._answer, cmd, reply_of))
        if self.immediate_in_flight >= self.config.requests_in_flight_max:
            self._update_reading()

    def _answer(
        self, cmd: Any, reply_of: Callable[[Any], object], outcome: Any, *, flush: bool = True
    ) -> None:
        """Send the reply of ``outcome``; at once when ``flush`` (it completed on a turn of its
        own: nothing else of that turn to wait for)."""
        self.immediate_in_flight -= 1
        self.send(_outcome_reply(cmd, reply_of, outcome))
        if flush:
            self._flush_out()
        if self._reading_paused:
            self._update_reading()

    def _hello(self, cmd: wire.Hello) -> None:
        self.send(wire.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION))
        if cmd.low_version > wire.WIRE_VERSION or cmd.high_version < wire.OLDEST_COMPATIBLE_VERSION:
            log.info(
                "client %s speaks versions %d..%d", self._peer(), cmd.low_version, cmd.high_version
            )
            self.close()

    # -- appends --------------------------------------------------------------------------------

    async def _setup_append(self, cmd: wire.SetupAppend) -> None:
        try:
            self.requests.authorize(cmd.delegation_token, cmd.segment, READ_UPDATE)
            self._check_writer_room(cmd.writer_id, cmd.segment)
            await self.requests.tables.refuse_table(cmd.segment)
            last = await self.store.last_event_number(cmd.segment, cmd.writer_id)
        except Exception as exc:
            self.send(reply_for_error(exc, request_id=cmd.request_id, segment=cmd.segment))
            return
        writer = _Writer(cmd.segment, cmd.writer_id, cmd.writer_id.bytes)
        self.writers[cmd.writer_id] = writer
        self._writers_by_raw[writer.raw] = writer
        self.send(wire.AppendSetup(cmd.request_id, cmd.segment, cmd.writer_id, last))

    def _check_writer_room(self, writer_id: uuid.UUID, segment: str) -> None:
        limit = self.config.writers_per_connection_max
        if writer_id not in self.writers and len(self.writers) >= limit:
            raise InvalidArgumentError(
                f"more than {limit} writers on one connection", segment=segment
            )

    def _writer(self, writer_id: uuid.UUID, request_id: int) -> _Writer | None:
        writer = self.writers.get(writer_id)
        if writer is None:
            message = f"writer {writer_id} has no SetupAppend on this connection"
            exc = AuthError(message) if self.config.auth_enabled else InvalidArgumentError(message)
            self.send(reply_for_error(exc, request_id=request_id))
        return writer

    def _plain_block(self, payload: bytes | memoryview) -> bool:
        """Queue an AppendBlockEnd payload that is well formed, of a writer set up here and
        without a failure, and passes ``_block_problem``, as ``_append_block_end`` would, but
        without decoding it into a command. False: the generic path must handle (and answer) it.
        """
        fields = split_append_block_end(payload)  # type: ignore[arg-type]
        if fields is None:
            return False
        raw, whole, end, num_events, last, request_id = fields
        writer = self._writers_by_raw.get(raw)
        size = end - APPEND_BLOCK_END_DATA_START
        if (
            writer is None
            or writer.failure is not None
            or num_events <= 0
            or last < writer.last_event_number
            or whole != size
        ):
            return False
        writer.last_event_number = last
        if size < _VIEW_BYTES_MIN:  # a copy costs less than a view, and the collector skips it
            data = payload[APPEND_BLOCK_END_DATA_START:end]
        else:
            data = memoryview(payload)[APPEND_BLOCK_END_DATA_START:end]
        pending = _PendingAppend(
            writer.segment,
            data,
            writer.writer_id,
            last,
            None,
            None,
            None,
            request_id,
            False,
            size,
            writer,
        )
        self._queue(writer, pending)
        return True

    def _append_block_end(self, cmd: wire.AppendBlockEnd) -> None:
        writer = self._writer(cmd.writer_id, cmd.request_id)
        if writer is None:
            return
        problem = _block_problem(cmd, writer)
        if problem is not None:
            self._enqueue_failed(
                writer, cmd.writer_id, cmd.last_event_number, cmd.request_id, problem
            )
            return
        writer.last_event_number = cmd.last_event_number
        self._enqueue(writer, cmd.writer_id, cmd.data, cmd.last_event_number, cmd.request_id, None)

    def _conditional_block_end(self, cmd: wire.ConditionalBlockEnd) -> None:
        writer = self._writer(cmd.writer_id, cmd.request_id)
        if writer is not None:
            self._conditional(writer, cmd, cmd.data)

    def _conditional_append(self, cmd: wire.ConditionalAppend) -> None:
        writer = self._writer(cmd.writer_id, cmd.request_id)
        if writer is not None:
            header = wire.EVENT_HEADER.pack(wire.EVENT_TYPE, len(cmd.data))
            self._conditional(writer, cmd, header + bytes(cmd.data))

    def _conditional(self, writer: _Writer, cmd: Any, data: bytes | memoryview) -> None:
        if cmd.expected_offset < 0:
            problem = InvalidArgumentError(f"negative expected offset {cmd.expected_offset}")
            self._enqueue_failed(writer, cmd.writer_id, cmd.event_number, cmd.request_id, problem)
            return
        self._enqueue(
            writer, cmd.writer_id, data, cmd.event_number, cmd.request_id, cmd.expected_offset
        )

    def _enqueue(
        self,
        writer: _Writer,
        writer_id: uuid.UUID,
        data: bytes | memoryview,
        event_number: int,
        request_id: int,
        expected_offset: int | None,
    ) -> None:
        if writer.failure is not None:
            self._enqueue_failed(writer, writer_id, event_number, request_id, writer.failure)
            return
        pending = _PendingAppend(
            writer.segment,
            data,
            writer_id,
            event_number,
            expected_offset,
            request_id=request_id,
            conditional=expected_offset is not None,
            size=len(data),
            writer=writer,
        )
        self._queue(writer, pending)

    def _queue(self, writer: _Writer, pending: _PendingAppend) -> None:
        """Count an append in flight and put it in the batch handed to the store."""
        writer.pending.append(pending)
        self.appends_in_flight += 1
        self.append_bytes_in_flight += pending.size
        self._batch.append(pending)

    def _enqueue_failed(
        self,
        writer: _Writer,
        writer_id: uuid.UUID,
        event_number: int,
        request_id: int,
        exc: BaseException,
    ) -> None:
        pending = _PendingAppend(
            writer.segment, b"", writer_id, event_number, request_id=request_id, writer=writer
        )
        pending.error = exc
        pending.done = True
        if _is_gap_failure(pending):
            writer.failure = exc
        writer.pending.append(pending)
        self.appends_in_flight += 1
        self._send_replies(writer)

    def _submit_batch(self) -> None:
        """Hand the appends collected from one received buffer to the store, together."""
        batch, self._batch = self._batch, []
        started = time.monotonic()
        try:
            parts = self.store.append_group_nowait(batch)
        except Exception as exc:
            log.exception("append_group_nowait failed")
            self._part_done(batch, started, _failed_future(exc))
        else:
            for part, future in parts:
                future.add_done_callback(functools.partial(self._part_done, part, started))
        self._update_reading()

    def _part_done(
        self, part: list[_PendingAppend], started: float, future: asyncio.Future[object]
    ) -> None:
        failure = _exception_of(future)
        if failure is None and not self.closed:
            if self._traffic is not None:
                self.server.traffic.record_latency(time.monotonic() - started)
                self._count_traffic(part)
            self._replies_of_part(part)
            self._update_reading()
            return
        writers: dict[int, _Writer] = {}
        for pending in part:
            if failure is not None:
                pending.error = failure
            elif pending.error is None and pending.result is None:  # pragma: no cover
                pending.error = ContainerOfflineError("append has no outcome")
            pending.done = True
            writer = pending.writer
            assert writer is not None
            writers[id(writer)] = writer
        for writer in writers.values():
            self._send_replies(writer)
        self._update_reading()

    def _count_traffic(self, part: list[_PendingAppend]) -> None:
        """Tell the traffic monitor what the store acknowledged (events and bytes a block)."""
        record = self._traffic
        assert record is not None
        for pending in part:
            result = pending.result
            if pending.error is None and result is not None:
                # a writer's first append has no previous event (a negative sentinel)
                events = pending.event_number - max(result.previous_event_number, 0)
                record(pending.segment, events if events > 0 else 1, pending.size)

    def _replies_of_part(self, part: list[_PendingAppend]) -> None:
        """``_part_done`` of a part that succeeded: an append that came out well and is its
        writer's oldest is answered at once; any other goes the ``_send_replies`` way."""
        out = self._out
        sent = 0
        for pending in part:
            writer = pending.writer
            assert writer is not None
            result = pending.result
            waiting = writer.pending
            if pending.error is None and result is not None and waiting[0] is pending:
                waiting.popleft()
                self.appends_in_flight -= 1
                self.append_bytes_in_flight -= pending.size
                out.append(
                    data_appended_frame(
                        writer.raw,
                        pending.event_number,
                        result.previous_event_number,
                        pending.request_id,
                        result.length,
                    )
                )
                sent += 1
                if waiting and waiting[0].done:  # refused after it, answered in turn
                    self._send_replies(writer)
                continue
            if pending.error is None and result is None:  # pragma: no cover
                pending.error = ContainerOfflineError("append has no outcome")
            pending.done = True
            self._send_replies(writer)
        if sent and not self._out_scheduled:
            self._out_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_out)

    def _send_replies(self, writer: _Writer) -> None:
        """Reply to the writer's blocks that are answered, in the order they arrived."""
        pending = writer.pending
        while pending and pending[0].done:
            done = pending.popleft()
            self.appends_in_flight -= 1
            self.append_bytes_in_flight -= done.size
            if _is_gap_failure(done):
                writer.failure = writer.failure or done.error
            self.send(_append_reply(writer, done))


def _ignore(cmd: object) -> None:
    return None


def _failed_future(exc: BaseException) -> asyncio.Future[object]:
    future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future


def _exception_of(future: asyncio.Future[object]) -> BaseException | None:
    if future.cancelled():
        return ContainerOfflineError("append cancelled: the segment store is stopping")
    return future.exception()


def _is_gap_failure(pending: _PendingAppend) -> bool:
    """A failed append after which later ones of the writer must not be applied."""
    exc = pending.error
    if exc is None:
        return False
    return not (pending.conditional and isinstance(exc, BadOffsetError))


def _append_reply(writer: _Writer, pending: _PendingAppend) -> object:
    exc = pending.error
    if exc is None:
        result = pending.result
        assert result is not None
        return wire.DataAppended(
            pending.writer_id,
            pending.event_number,
            result.previous_event_number,
            pending.request_id,
            result.length,
        )
    if pending.conditional and isinstance(exc, BadOffsetError):
        return wire.ConditionalCheckFailed(
            pending.writer_id, pending.event_number, pending.request_id
        )
    return reply_for_error(
        exc,
        request_id=pending.request_id,
        segment=writer.segment,
        writer_id=pending.writer_id,
        event_number=pending.event_number,
    )


def _block_problem(cmd: wire.AppendBlockEnd, writer: _Writer) -> Exception | None:
    if cmd.num_events <= 0:
        return BadEventNumberError(f"block has {cmd.num_events} events", segment=writer.segment)
    if cmd.last_event_number < writer.last_event_number:
        return BadEventNumberError(
            f"event number {cmd.last_event_number} goes back from {writer.last_event_number}",
            segment=writer.segment,
        )
    if cmd.size_of_whole_events != len(cmd.data):
        return InvalidArgumentError(
            f"sizeOfWholeEvents {cmd.size_of_whole_events} but {len(cmd.data)} data bytes "
            "(partial events and AppendBlock are not supported)",
            segment=writer.segment,
        )
    return None


def _outcome_reply(cmd: Any, reply_of: Callable[[Any], object], outcome: Any) -> object:
    """The reply to ``cmd`` of its done ``outcome`` (``reply_of`` its result, or its error)."""
    if outcome.cancelled():
        return _error_reply(ContainerOfflineError("the request was cancelled"), cmd)
    if outcome.exception() is not None:
        return _error_reply(outcome.exception(), cmd)
    return reply_of(outcome.result())


def _error_reply(exc: BaseException, cmd: Any) -> object:
    return reply_for_error(
        exc, request_id=cmd.request_id, segment=_segment_of(cmd), offset=getattr(cmd, "offset", -1)
    )


def _segment_of(cmd: Any) -> str:
    for field in ("segment", "segment_name", "target", "parent_segment", "target_segment_id"):
        value = getattr(cmd, field, None)
        if isinstance(value, str):
            return value
    return ""
