"""A blocking connection to a segment store, for request/response calls from the caller's own
thread.

Responsibility: ``DirectConnection`` is one TCP (or TLS) socket that says Hello, then sends
one request at a time and reads its reply, in the thread that asks: no event loop, no hop to
another thread. A blocking call that waits for one answer (a key-value table's ``get`` or
``put``) costs its round trip and nothing more, as with redis-py. A lock serializes the
callers of one connection. Error replies become the exceptions of ``millrace.client.errors``;
an expired default token is renewed once (``token_refresh``); a socket error or a timeout
closes the connection and raises ``ConnectionLostError`` (whether a change was made is then
unknown).
"""

from __future__ import annotations

import itertools
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from millrace.client.errors import (
    AuthTokenCheckFailedError,
    ConnectionLostError,
    error_from_reply,
)
from millrace.client.transport.table_calls import TableRequest
from millrace.kernel import wire

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
        timeout: float = 30.0,
        token: str = "",
        token_refresh: Callable[[], str] | None = None,
    ) -> None:
        self.token = token
        self.token_refresh = token_refresh
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ConnectionLostError(f"segment store {host}:{port}: {exc}") from exc
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._sock = tls.wrap_socket(raw, server_hostname=host) if tls else raw
            # Replies are read through a buffer: a reply's header and body in one ``recv``.
            self._reader = self._sock.makefile("rb", buffering=REPLY_BUFFER_BYTES)
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
                while getattr(reply, "request_id", request_id) != request_id:
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
        self._sock.sendall(wire.encode_frame(command))

    def _receive(self) -> Any:
        kind, length = wire.FRAME_HEADER.unpack(self._exactly(wire.FRAME_HEADER_BYTES))
        if not 0 <= length <= wire.FRAME_PAYLOAD_BYTES_MAX:
            raise wire.ProtocolError(f"frame of {length} bytes")
        return wire.decode_frame(kind, self._exactly(length))

    def _exactly(self, size: int) -> bytes:
        data: bytes = self._reader.read(size)
        if len(data) < size:
            raise ConnectionLostError("the segment store closed the connection")
        return data

    def close(self) -> None:
        self.closed = True
        self._reader.close()
        self._sock.close()
