"""A blocking connection to a segment store, for request/response calls from the caller's own
thread.

Responsibility: ``DirectConnection`` is one TCP (or TLS) socket that says Hello, then sends
one request at a time and reads its reply, in the thread that asks: no event loop, no hop to
another thread. A blocking call that waits for one answer (a key-value table's ``get`` or
``put``) costs its round trip and nothing more, as with redis-py. A lock serializes the
callers of one connection. Error replies become the exceptions of ``millrace.client.errors``;
an expired default token is renewed once (``token_refresh``); a socket error, or a node silent
for ``silence_s`` (it is sent a KeepAlive after each ``keepalive_s`` of silence while a reply is
awaited, as ``Connection`` does), closes the connection and raises ``ConnectionLostError``
(whether a change was made is then unknown).
"""

from __future__ import annotations

import itertools
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from millrace.client.errors import (
    AuthTokenCheckFailedError,
    ConnectionLostError,
    error_from_reply,
)
from millrace.client.transport.connection import CONNECT_S, KEEPALIVE_S, liveness_off
from millrace.client.transport.table_calls import TableRequest
from millrace.kernel import defaults, wire

__all__ = ["DirectConnection"]

T = TypeVar("T")

#: Bytes of replies read ahead at most (one ``recv``).
REPLY_BUFFER_BYTES = 64 * 1024


class DirectConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        token: str = "",
        token_refresh: Callable[[], str] | None = None,
        keepalive_s: float = KEEPALIVE_S,
        silence_s: float = defaults.CLIENT_SILENCE_SECONDS,
    ) -> None:
        self.token = token
        self.token_refresh = token_refresh
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        #: The liveness watch, as ``Connection``'s: a KeepAlive after ``keepalive_s`` waiting
        #: without a byte, the connection given up after ``silence_s``.
        self.keepalive_s = keepalive_s
        self.silence_s = 0.0 if liveness_off() else silence_s
        self.where = f"{host}:{port}"
        try:
            raw = socket.create_connection((host, port), timeout=CONNECT_S)
        except OSError as exc:
            raise ConnectionLostError(f"segment store {host}:{port}: {exc}") from exc
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        #: Bytes received and not yet taken (a reply's header and body come in one ``recv``).
        self._buffer = bytearray()
        try:
            self._sock = tls.wrap_socket(raw, server_hostname=host) if tls else raw
            self._send(wire.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION))
            hello = self._receive()
        except BaseException:
            raw.close()
            raise
        if not isinstance(hello, wire.Hello) or not (
            hello.low_version <= wire.WIRE_VERSION <= hello.high_version
        ):
            self.close()
            raise ConnectionLostError(f"segment store {host}:{port} answered {hello!r} to Hello")
        self.closed = False

    def run(self, request: TableRequest[T], *, refreshed: bool = False) -> T:
        """Send ``request`` and wait for its reply; its answer (or the reply's error)."""
        with self._lock:
            if self.closed:
                raise ConnectionLostError("the connection is closed")
            request_id = next(self._ids)
            try:
                self._send(request.make(request_id, self.token))
                reply = self._receive()
                while isinstance(reply, wire.KeepAlive) or (
                    getattr(reply, "request_id", request_id) != request_id
                ):
                    reply = self._receive()  # (a keep-alive, or a late reply: not ours)
            except (OSError, ConnectionLostError, wire.ProtocolError) as exc:
                self.close()
                raise ConnectionLostError(f"connection lost: {exc}") from exc
        if isinstance(reply, request.expected):
            return request.parse(reply)
        error = error_from_reply(reply)
        if (
            isinstance(error, AuthTokenCheckFailedError) and error.expired
            and self.token_refresh is not None and not refreshed
        ):  # fmt: skip
            self.token = self.token_refresh()
            return self.run(request, refreshed=True)
        raise error

    def _send(self, command: Any) -> None:
        self._sock.settimeout(self.silence_s)  # (the whole send: a node that takes nothing)
        self._sock.sendall(wire.encode_frame(command))

    def _receive(self) -> Any:
        kind, length = wire.FRAME_HEADER.unpack(self._exactly(wire.FRAME_HEADER_BYTES))
        if not 0 <= length <= wire.FRAME_PAYLOAD_BYTES_MAX:
            raise wire.ProtocolError(f"frame of {length} bytes")
        return wire.decode_frame(kind, self._exactly(length))

    def _exactly(self, size: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < size:
            chunk = self._recv()
            if not chunk:
                raise ConnectionLostError("the segment store closed the connection")
            buffer += chunk
        data = bytes(buffer[:size])
        del buffer[:size]
        return data

    def _recv(self) -> bytes:
        """What arrives next; a KeepAlive after each ``keepalive_s`` of silence, and
        ``ConnectionLostError`` after ``silence_s`` of it (a partitioned or paused node)."""
        silent_since = time.monotonic()
        self._sock.settimeout(self.keepalive_s)
        while True:
            try:
                return self._sock.recv(REPLY_BUFFER_BYTES)
            except TimeoutError:
                silent = time.monotonic() - silent_since
                if self.silence_s and silent >= self.silence_s:
                    raise ConnectionLostError(
                        f"the segment store at {self.where} sent nothing for {silent:.1f} s"
                        " (partitioned, paused or gone): connection given up"
                    ) from None
                self._send(wire.KeepAlive())
                self._sock.settimeout(self.keepalive_s)

    def close(self) -> None:
        self.closed = True
        self._sock.close()
