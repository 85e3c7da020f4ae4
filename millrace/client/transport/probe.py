"""A wire-level keep-alive check of a segment store node, for health checks and supervisors.

Responsibility: answer "is this node's wire server serving?" within a stated time, without an
event loop. ``probe_segment_store`` opens a TCP connection to the node's client port, sends
the protocol's ``Hello`` and waits for the node's ``Hello`` back. A node that is down refuses
the connection; a node that is hung (stopped, or its event loop blocked) accepts it in the
kernel but never answers, and the probe fails when its timeout runs out.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time

from millrace.kernel import wire as wire
from millrace.kernel.tls import explain

__all__ = ["ProbeError", "probe_segment_store"]

_HEADER = wire.FRAME_HEADER
_HELLO = wire.encode_frame(wire.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION))
#: A Hello answer is a few bytes; anything this large is not one.
_ANSWER_BYTES_MAX = 1024


class ProbeError(Exception):
    """The node did not answer the keep-alive in time, or answered nonsense; says which."""


def probe_segment_store(
    host: str, port: int, timeout: float = 1.0, *, tls: ssl.SSLContext | None = None
) -> float:
    """Seconds the node took to answer a ``Hello`` (over TLS with ``tls``); ``ProbeError``
    when it did not in ``timeout`` seconds (all of it: connect, handshakes and answer)."""
    started = time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            sock = stack.enter_context(socket.create_connection((host, port), timeout=timeout))
            if tls is not None:
                sock = stack.enter_context(tls.wrap_socket(sock, server_hostname=host))
            sock.settimeout(max(timeout - (time.monotonic() - started), 0.001))
            sock.sendall(
                wire.encode_frame(wire.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION))
            )
            type_code, length = _HEADER.unpack(_read_exactly(sock, _HEADER.size))
            if length > _ANSWER_BYTES_MAX:
                raise ProbeError(f"answered a frame of {length} bytes instead of Hello")
            answer = wire.decode_frame(type_code, _read_exactly(sock, length), lenient=True)
    except TimeoutError:
        raise ProbeError(f"no answer from {host}:{port} within {timeout:g} s") from None
    except OSError as exc:
        reason = explain(exc, f"{host}:{port}")
        raise ProbeError(reason or f"{host}:{port}: {exc.strerror or exc}") from None
    except wire.ProtocolError as exc:
        raise ProbeError(f"{host}:{port} answered a malformed frame: {exc}") from None
    if not isinstance(answer, wire.Hello):
        raise ProbeError(f"{host}:{port} answered {type(answer).__name__} instead of Hello")
    return time.monotonic() - started


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    parts, left = [], count
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ProbeError("the node closed the connection before answering")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)
