"""The controller's gRPC endpoint: a grpcio aio server on a thread of the controller process.

Responsibility: ``GrpcEndpoint(host, port, tls).start()`` binds the port (Pravega's 9090 by
default, ``MILLRACE_GRPC_PORT`` / ``--grpc-port``; 0 turns it off) and serves
``ControllerService`` on its own event loop, so that the ASGI app's loop is never held by it;
``stop()`` lets calls in flight finish for a few seconds. With TLS the server presents the
node's certificate and re-reads it when its files change (gRPC's dynamic credentials).
``serving()`` is what the health tree reports.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError

from controller_app.grpc import controller_pb2 as pb
from controller_app.grpc.service import ControllerService
from millrace.kernel.config import TlsSettings

__all__ = ["GrpcEndpoint", "GrpcStartError", "serving"]

log = logging.getLogger(__name__)

#: Largest request a client may send (Pravega's clients send small messages).
MESSAGE_BYTES_MAX = 4 << 20
#: How long calls in flight may finish at a stop.
STOP_GRACE_SECONDS = 5.0

_state: dict[str, Any] = {"address": None, "error": None, "tls": False}


def serving() -> dict[str, Any]:
    """This process's gRPC endpoint: ``address`` (host, port) while it serves, ``error`` if it
    could not start, ``tls``."""
    return dict(_state)


class GrpcStartError(Exception):
    """The port could not be bound (in use, not allowed, or a certificate that does not load)."""


def _credentials(tls: TlsSettings) -> grpc.ServerCredentials:
    """The node's certificate, re-read by gRPC when the files' modification times change."""

    def files() -> tuple[float, ...]:
        paths = [tls.cert_file, tls.key_file, *([tls.ca_file] if tls.ca_file else [])]
        return tuple(os.stat(p).st_mtime for p in paths if p)

    def configuration() -> Any:
        with open(tls.key_file or "", "rb") as key, open(tls.cert_file or "", "rb") as cert:
            pair = [(key.read(), cert.read())]
        root = None
        if tls.ca_file:
            with open(tls.ca_file, "rb") as ca:
                root = ca.read()
        return grpc.ssl_server_certificate_configuration(pair, root_certificates=root)

    seen = {"stamp": files()}

    def fetch() -> Any:
        try:
            stamp = files()
        except OSError:
            return None  # (a rename in progress: keep the current certificate)
        if stamp == seen["stamp"]:
            return None
        seen["stamp"] = stamp
        log.warning("gRPC: the TLS certificate changed; new handshakes use the new one")
        return configuration()

    return grpc.dynamic_ssl_server_credentials(configuration(), fetch)


def _handlers(service: ControllerService) -> grpc.GenericRpcHandler:
    """Every rpc of the proto's ``ControllerService``, each parsing its own request so that a
    malformed one is answered INVALID_ARGUMENT naming the message (gRPC's own parsing answers
    UNKNOWN, which Pravega's clients retry)."""
    described = pb.DESCRIPTOR.services_by_name["ControllerService"]
    handlers = {}
    for method in described.methods:
        kind = message_factory.GetMessageClass(method.input_type)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            _parsing(getattr(service, method.name), kind),
            response_serializer=lambda message: message.SerializeToString(),
        )
    return grpc.method_handlers_generic_handler(described.full_name, handlers)


def _parsing(call: Callable[[Any, Any], Awaitable[Any]], kind: Any) -> Any:
    async def handler(raw: bytes, context: Any) -> Any:
        try:
            request = kind.FromString(raw)
        except DecodeError as exc:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"malformed {kind.DESCRIPTOR.name}: {exc}"
            )
        return await call(request, context)

    return handler


class GrpcEndpoint:
    def __init__(self, host: str, port: int, tls: TlsSettings | None = None) -> None:
        self.host, self.port = host, port
        self.tls = tls if tls is not None and tls.enabled else None
        self._loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        self._thread = threading.Thread(target=self._run, name="millrace-grpc", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> GrpcEndpoint:
        """Bind and serve; GrpcStartError if the port cannot be bound."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            _state.update(address=None, error=str(self._error))
            raise GrpcStartError(
                f"the gRPC endpoint cannot listen on {self.host}:{self.port}: {self._error}"
            ) from self._error
        _state.update(address=(self.host, self.port), error=None, tls=self.tls is not None)
        log.info("gRPC controller endpoint (Pravega's clients) on %s://%s:%d",
                 "tls" if self.tls else "tcp", self.host, self.port)  # fmt: skip
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._open())
        except BaseException as exc:  # reported by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    async def _open(self) -> None:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
                ("grpc.so_reuseport", 0),
            ]
        )
        server.add_generic_rpc_handlers((_handlers(ControllerService((self.host, self.port))),))
        address = f"{self.host}:{self.port}"
        try:
            if self.tls is not None:
                bound = server.add_secure_port(address, _credentials(self.tls))
            else:
                bound = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise OSError(f"cannot bind {address} (in use?)") from exc
        if not bound:
            raise OSError(f"cannot bind {address} (in use?)")
        self.port = bound
        await server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is None or not self._thread.is_alive():
            return
        done = asyncio.run_coroutine_threadsafe(self._server.stop(STOP_GRACE_SECONDS), self._loop)
        try:
            done.result(STOP_GRACE_SECONDS + 2)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            _state.update(address=None)
