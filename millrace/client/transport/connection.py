"""The transport of a segment store client: one TCP connection, its send queue and congestion.

Responsibility: ``Connection`` is the asyncio protocol of one connection to a segment store.
It queues encoded commands and hands them to the socket in large writes (``send``,
``flush_out``), tracks congestion (the socket takes no more), says Hello, matches replies to
requests by request id (``request``), and gives everything about appends (acknowledgements,
errors of append blocks, a drained send buffer, a lost connection) to its ``AppendListener``.
It knows nothing of the commands' meaning: ``millrace.client.transport.calls`` and
``millrace.client.transport.appends`` build on it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import struct
from collections.abc import Callable
from typing import Any, Protocol

from millrace.client.errors import ConnectionLostError, SegmentStoreError
from millrace.kernel import defaults, traces, wire

__all__ = [
    "CONNECT_S",
    "KEEPALIVE_S",
    "SEND_BUFFER_BYTES",
    "WRITE_CHUNK_BYTES",
    "AppendListener",
    "Connection",
    "liveness_off",
]

log = logging.getLogger(__name__)

#: Bytes queued in the transport before it is congested (the socket takes no more: the
#: server reads slower than we append): blocks then wait in their writers' open blocks, which
#: grow (fewer, larger blocks for the server), and sent blocks in ``Connection.out``, instead
#: of this buffer. (Kept small: the transport copies what the socket does not take into a
#: buffer that grows and shrinks by as much, and at megabytes each growth is fresh pages for
#: the kernel to fault in and zero, which cost the producer a fifth of its time.)
SEND_BUFFER_BYTES = 1024 * 1024
#: Bytes handed to the transport in one write (it joins them into one buffer: see above); a
#: part of at least this many (a raw block's buffer) is written alone, not joined (a copy).
WRITE_CHUNK_BYTES = 256 * 1024
#: DataAppended's payload as this version sends it (writer id, event number, previous event
#: number, request id, segment write offset), decoded without the generic codec.
_DATA_APPENDED = struct.Struct(">16sqqqq")
_DATA_APPENDED_TYPE = wire.DataAppended.TYPE
#: A connection nothing arrived on for this long sends a KeepAlive (the segment store answers
#: each one, as Pravega's does); one nothing arrived on for ``defaults.CLIENT_SILENCE_SECONDS``
#: is given up as silent: it is aborted with ``ConnectionLostError``, so that what waits on it
#: (appends, requests) fails over like a crash; far above a slow link's round trip (a live node
#: answers a KeepAlive within one).
KEEPALIVE_S = 1.0
#: A new connection that is not accepted and greeted (Hello) within this long is given up: a
#: partitioned node answers no SYN, a paused one accepts (its kernel does) and never says Hello.
#: Room for one lost SYN (resent after 1 s) on a slow link.
CONNECT_S = 2.0

#: How many given-up request ids a connection remembers (see ``Connection._abandoned``).
ABANDONED_KEPT = 1024


class AppendListener(Protocol):
    """What a connection tells the append side (``millrace.client.transport.appends``)."""

    def data_appended(self, writer: int, number: int, previous: int, offset: int) -> None:
        """An acknowledgement for the writer whose ``writer_id.int`` is ``writer``."""

    def block_reply(self, request_id: int, reply: Any) -> bool:
        """A reply no request waits for: if it answers an append block, take it (True)."""

    def replies_read(self) -> None:
        """The replies of one read from the socket were all given."""

    def drained(self) -> None:
        """The transport is not congested (after a flush or ``resume_writing``)."""

    def lost(self) -> None:
        """The connection is gone (``Connection.lost`` says why)."""


class Connection(asyncio.BufferedProtocol):
    """One connection to a segment store (made by ``loop.create_connection``)."""

    def __init__(
        self, request_timeout: float, *, keepalive_s: float = KEEPALIVE_S,
        silence_s: float = defaults.CLIENT_SILENCE_SECONDS,
    ) -> None:  # fmt: skip
        #: Who hears about appends (``listen``; the client's append sessions).
        self.appends: AppendListener
        self.request_timeout = request_timeout
        #: The liveness watch (``_watch``): a KeepAlive after ``keepalive_s`` without a byte
        #: from the peer, given up after ``silence_s`` (0: never; TEST-ONLY switch
        #: ``MILLRACE_TEST_UNSAFE=no-client-liveness``).
        self.keepalive_s = keepalive_s
        self.silence_s = 0.0 if liveness_off() else silence_s
        #: When (loop time) a byte last arrived; whether the watch gave the connection up.
        self.heard = 0.0
        self.silent = False
        self._watcher: asyncio.TimerHandle | None = None
        self.assembler = wire.FrameAssembler()
        self.transport: asyncio.Transport | None = None
        #: Encoded commands not yet handed to the transport (see ``send``).
        self.out: list[bytes | bytearray | memoryview] = []
        self._out_scheduled = False
        #: Request ids, for requests and append blocks alike (replies are matched by them).
        self.request_ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        #: Requests given up (timed out, cancelled) whose replies may still come: those are
        #: expected, not a server's mistake (the newest ABANDONED_KEPT, oldest first).
        self._abandoned: dict[int, None] = {}
        self._hello: asyncio.Future[wire.Hello] | None = None
        #: Why the connection is gone (None while it is up).
        self.lost: SegmentStoreError | None = None
        self.closed = asyncio.get_running_loop().create_future()
        #: The transport's send buffer is over SEND_BUFFER_BYTES.
        self.congested = False

    def listen(self, appends: AppendListener) -> None:
        """Tell ``appends`` everything about appends on this connection (before it connects)."""
        self.appends = appends

    # -- asyncio protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=SEND_BUFFER_BYTES)  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        self.heard = loop.time()
        if self.silence_s > 0:
            self._watcher = loop.call_later(self.keepalive_s, self._watch)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.assembler.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.heard = asyncio.get_running_loop().time()
        appends = self.appends
        try:
            for type_code, payload in self.assembler.buffer_updated(nbytes):
                if type_code == _DATA_APPENDED_TYPE and len(payload) == _DATA_APPENDED.size:
                    writer, number, previous, _rid, offset = _DATA_APPENDED.unpack(payload)
                    appends.data_appended(int.from_bytes(writer), number, previous, offset)
                    continue
                self._on_reply(wire.decode_frame(type_code, payload, lenient=True))
        except wire.ProtocolError as exc:
            self.abort(ConnectionLostError(f"undecodable reply: {exc}"))
        appends.replies_read()

    def connection_lost(self, exc: Exception | None) -> None:
        self.congested = False
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        lost = self.lost or ConnectionLostError(f"connection lost: {exc or 'closed'}")
        if lost.__cause__ is None and exc is not None:
            lost.__cause__ = exc  # (what TLS said, for ``TlsRefused``)
        self.lost = lost
        for future in self._pending.values():
            if not future.done():
                future.set_exception(lost)
        self._pending.clear()
        if self._hello is not None and not self._hello.done():
            self._hello.set_exception(lost)
        self.appends.lost()
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        """The transport's send buffer is over its high-water mark (the server reads slower
        than we append): the append side holds blocks that are not full instead."""
        self.congested = True

    def resume_writing(self) -> None:
        self.congested = False
        self.flush_out()  # (and the held blocks)

    # -- sending --------------------------------------------------------------------------------

    def send(self, cmd: Any) -> None:
        """Queue a command; those queued during one event-loop turn (e.g. the blocks of many
        writers whose linger expired together) go out in one write (one syscall)."""
        if self.lost is not None:
            raise self.lost
        assert self.transport is not None
        self.out.extend(wire.encode_parts(cmd))
        if not self._out_scheduled:
            self._out_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush_out)

    def flush_out(self, *, everything: bool = False) -> None:
        """Hand the queued commands to the transport, WRITE_CHUNK_BYTES at a time, until it is
        congested (the rest wait for ``resume_writing``, unless ``everything``)."""
        self._out_scheduled = False
        transport, out = self.transport, self.out
        if transport is None or transport.is_closing():
            out.clear()
        elif out:
            start = size = 0
            last = len(out)
            for end, part in enumerate(out, 1):
                size += len(part)
                if size >= WRITE_CHUNK_BYTES or end == last:
                    if self.congested and not everything:
                        break
                    if len(part) >= WRITE_CHUNK_BYTES:  # a big buffer goes as it is, unjoined
                        if end - 1 > start:
                            transport.writelines(out[start : end - 1])
                        transport.write(part)  # may call pause_writing
                    else:
                        transport.writelines(out[start:end])  # may call pause_writing
                    start, size = end, 0
            if start:
                del out[:start]
        if not self.congested:
            self.appends.drained()

    # -- requests -------------------------------------------------------------------------------

    async def request(self, make: Callable[[int], Any]) -> Any:
        """Send ``make(request_id)`` and return its reply (whatever it is)."""
        request_id = next(self.request_ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            traceparent = traces.current_traceparent()
            if traceparent is not None:  # (a sampled trace: the request's span joins it)
                self.send(wire.TraceContext(traceparent))
            self.send(make(request_id))
            return await asyncio.wait_for(future, self.request_timeout)
        finally:
            self._pending.pop(request_id, None)
            if not future.done() or future.cancelled():  # (given up: its reply may come late)
                self._abandoned[request_id] = None
                if len(self._abandoned) > ABANDONED_KEPT:
                    del self._abandoned[next(iter(self._abandoned))]

    async def handshake(self) -> None:
        """Exchange Hello; a server that speaks no version of ours is refused."""
        self._hello = asyncio.get_running_loop().create_future()
        self.send(wire.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION))
        hello = await asyncio.wait_for(self._hello, self.request_timeout)
        if not hello.low_version <= wire.WIRE_VERSION <= hello.high_version:
            low, high = hello.low_version, hello.high_version
            error = ConnectionLostError(
                f"server speaks versions {low}..{high}, not {wire.WIRE_VERSION}"
            )
            self.abort(error)
            raise error

    def _on_reply(self, reply: Any) -> None:
        if isinstance(reply, wire.DataAppended):
            self.appends.data_appended(
                reply.writer_id.int,
                reply.event_number,
                reply.previous_event_number,
                reply.current_segment_write_offset,
            )
            return
        if isinstance(reply, wire.Hello):
            if self._hello is not None and not self._hello.done():
                self._hello.set_result(reply)
            return
        request_id = getattr(reply, "request_id", None)
        future = self._pending.pop(request_id, None) if request_id is not None else None
        if future is not None:
            if not future.done():
                future.set_result(reply)
        elif request_id is not None and self.appends.block_reply(request_id, reply):
            pass
        elif request_id in self._abandoned:
            del self._abandoned[request_id]
            log.debug("late reply to a request given up: %r", reply)
        elif not isinstance(reply, wire.KeepAlive):
            log.warning("segment store sent an unsolicited %r", reply)
            if request_id == wire.NO_REQUEST_ID and isinstance(reply, wire.ErrorMessage):
                # The server gives the connection up (it closes it next): so does the client
                # now, so that every append and call on it fails over at once.
                self.abort(ConnectionLostError(f"server closed the connection: {reply.message}"))

    # -- liveness -------------------------------------------------------------------------------

    def _watch(self) -> None:
        """Every ``keepalive_s``: a KeepAlive if nothing arrived meanwhile; the connection is
        aborted once nothing arrived for ``silence_s`` (a TCP connection to a partitioned or
        paused node never fails by itself: the kernel retransmits for many minutes)."""
        self._watcher = None
        transport = self.transport
        if self.lost is not None or transport is None or transport.is_closing():
            return
        loop = asyncio.get_running_loop()
        silent = loop.time() - self.heard
        if silent >= self.silence_s:
            self.silent = True
            peer = transport.get_extra_info("peername") or ("?", 0)
            self.abort(ConnectionLostError(
                f"the segment store at {peer[0]}:{peer[1]} sent nothing for {silent:.1f} s"
                " (partitioned, paused or gone): connection given up"
            ))  # fmt: skip
            return
        if silent >= self.keepalive_s:
            self.send(wire.KeepAlive())
            if self.congested:  # (the send buffer is full: the probe goes out first anyway)
                self.flush_out(everything=True)
        self._watcher = loop.call_later(self.keepalive_s, self._watch)

    # -- closing --------------------------------------------------------------------------------

    async def close(self) -> None:
        """Send what is queued, close, and wait until the connection is gone."""
        if self.transport is not None and not self.transport.is_closing():
            self.flush_out(everything=True)  # queued commands go out before it closes
            self.transport.close()
        if self.transport is not None:
            await asyncio.shield(self.closed)

    def abort(self, error: SegmentStoreError) -> None:
        self.lost = self.lost or error
        if self.transport is not None:
            self.transport.abort()


def liveness_off() -> bool:
    """TEST-ONLY: ``MILLRACE_TEST_UNSAFE`` names ``no-client-liveness`` (``UNSAFE_TEST_FLAGS``:
    the acceptance tests show that a silent node then stalls its writers)."""
    flags = os.environ.get("MILLRACE_TEST_UNSAFE", "")
    return "no-client-liveness" in (flag.strip() for flag in flags.split(","))
