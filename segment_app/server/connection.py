"""One client connection of the wire server: the socket, framing, dispatch and back-pressure.

Responsibility: read frames straight into reusable buffers (``asyncio.BufferedProtocol``), decode
them, and answer each one:

* Hello is answered with Hello(17, 5); a client whose version range excludes 17..5 is
  disconnected after the answer, as Pravega does. KeepAlive is answered with KeepAlive at once
  (the clients' liveness watch: a node that stops answering is left behind).
* SetupAppend and the append frames go to the connection's append path
  (``segment_app.server.appends``), which pipelines them to the store and answers each block
  once it is durable, in order per writer.
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
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from millrace.kernel import traces
from millrace.kernel import wire as wire
from segment_app.engine.errors import ContainerOfflineError
from segment_app.server.appends import AppendPath
from segment_app.server.replies import reply_for_error
from segment_app.server.services import ConnectionServices

__all__ = ["WireConnection"]

log = logging.getLogger(__name__)

#: The first byte of a TLS record that opens a handshake (a ClientHello).
_TLS_HANDSHAKE = 0x16


class WireConnection(asyncio.BufferedProtocol):
    def __init__(self, services: ConnectionServices) -> None:
        self.services = services
        self.config = services.config
        self.store = services.store
        self.requests = services.requests
        self.assembler = wire.FrameAssembler(buffer_bytes=self.config.receive_buffer_bytes)
        #: Where the connection's first bytes land, until they are looked at (``_tls_hello``).
        self._first: memoryview | None = None
        self._greeted = False
        self.transport: asyncio.Transport | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        #: Requests answered without a task (``_request_now``) and not answered yet.
        self.immediate_in_flight = 0
        self.closed = False
        self._write_paused = False
        #: Read nothing more from the client until then (``hold``; monotonic seconds).
        self._held_until = 0.0
        self._reading_paused = False
        #: Encoded replies not yet handed to the transport (sent together, see ``send``).
        self._out: list[bytes | bytearray | memoryview] = []
        self._out_scheduled = False
        self.appends = AppendPath(services, self)
        self._sync_handlers: dict[int, Callable[[Any], None]] = {
            wire.Hello.TYPE: self._hello,
            wire.KeepAlive.TYPE: self.send,  # (answered in kind: see the module's docstring)
            wire.Padding.TYPE: _ignore,
            wire.AppendBlockEnd.TYPE: self.appends.append_block_end,
            wire.ConditionalBlockEnd.TYPE: self.appends.conditional_block_end,
            wire.ConditionalAppend.TYPE: self.appends.conditional_append,
            wire.TraceContext.TYPE: self._trace_context,
        }
        #: The trace context the next request is traced in (a ``TraceContext`` before it).
        self._traceparent: str | None = None

    # -- asyncio protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.services.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.services.connections.discard(self)
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
        appends = self.appends
        for type_code, payload in frames:
            if self.closed:
                break
            if type_code != plain or not appends.plain_block(payload):
                self._on_frame(type_code, payload)
        if appends.batch:
            appends.submit_batch()

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
        self.update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self.update_reading()

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

    def send_frames(self, frames: list[bytes]) -> None:
        """Queue replies encoded already (``send``'s way: out together at the turn's end)."""
        if not frames or self.closed:
            return
        self._out.extend(frames)
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

    def hold(self, seconds: float) -> None:
        """Read nothing more from this client for ``seconds`` (a scope over its quota); the
        caller calls ``end_hold`` when they are over."""
        self._held_until = max(self._held_until, time.monotonic() + seconds)
        self.update_reading()

    def end_hold(self) -> None:
        """The hold is over: read again (unless something else pauses reading). Not left to
        the clock: a loop's timer may fire a little before ``time.monotonic()`` reaches the
        hold's end (uvloop's do, by up to a millisecond), and then nothing would resume it."""
        self._held_until = 0.0
        self.update_reading()

    def update_reading(self) -> None:
        if self.closed or self.transport is None:
            return
        pause = (
            self._write_paused
            or (self._held_until > 0.0 and time.monotonic() < self._held_until)
            or self.appends.in_flight >= self.config.appends_in_flight_max
            or self.appends.bytes_in_flight >= self.config.append_bytes_in_flight_max
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
            self._spawn(self.appends.setup_append(cmd))
        elif self._traceparent is not None and type_code in self.requests.handlers:
            traceparent, self._traceparent = self._traceparent, None  # (traced: with a task)
            self._spawn(self._request(type_code, cmd, traceparent))
        elif type_code in self.requests.immediate:
            self._request_now(type_code, cmd)
        elif type_code in self.requests.handlers:
            self._spawn(self._request(type_code, cmd))
        else:
            self._unsupported(cmd)

    def _trace_context(self, cmd: wire.TraceContext) -> None:
        self._traceparent = cmd.traceparent

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
        self.update_reading()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.update_reading()

    async def _request(self, type_code: int, cmd: Any, traceparent: str | None = None) -> None:
        name = type(cmd).__name__
        with traces.remote_span(traceparent, f"segmentstore {name}", **_traced(cmd)):
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
            self.update_reading()

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
            self.update_reading()

    def _hello(self, cmd: wire.Hello) -> None:
        self.send(wire.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION))
        if cmd.low_version > wire.WIRE_VERSION or cmd.high_version < wire.OLDEST_COMPATIBLE_VERSION:
            log.info(
                "client %s speaks versions %d..%d", self._peer(), cmd.low_version, cmd.high_version
            )
            self.close()


def _ignore(cmd: object) -> None:
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


def _traced(cmd: Any) -> dict[str, Any]:
    """What a request's span says of it (its segment, its request id)."""
    found = {"millrace.request_id": getattr(cmd, "request_id", wire.NO_REQUEST_ID)}
    segment = getattr(cmd, "segment", None)
    if isinstance(segment, str):
        found["millrace.segment"] = segment
    return found
