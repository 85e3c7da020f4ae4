"""The HTTP port a process of a node answers probes and scrapes on: ``/live``, ``/ready`` and
``/metrics``, served from daemon threads by prometheus-client's threading WSGI server.

The segment store node (``segment_app.server.metrics``), the Celery worker and beat
(``controller_app.operations.process_port``) each build one with what only they know: whether they
are alive and ready, and their collectors.

* ``GET /live`` and ``GET /ready`` need no credentials (an orchestrator's probe has none).
  They answer 200 or 503 with ``{"live"|"ready": bool, "reason": str}``.
* ``GET /metrics`` needs ``Authorization: Bearer <delegation token for *>`` while
  authentication is on. It answers the process's default metrics: low-cardinality, per
  stream, reader group or node. ``GET /metrics?detail=1`` adds the detail (per segment, per
  reader), which can be large.
* Anything else the process adds (the segment store's ``/traffic``) goes through the same
  token check.

With TLS the port serves HTTPS with the node's certificate. Each connection shakes hands in its
request's thread, so a slow peer holds up no other.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from millrace.kernel.claims import READ, AuthError

__all__ = [
    "Answer",
    "BuildInfo",
    "CertificateEnd",
    "MetricsPort",
    "PortApp",
    "bearer_token",
    "certificate_end",
    "fresh",
    "json_answer",
    "version",
]

log = logging.getLogger(__name__)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]
#: A probe's answer: whether it holds, and why not (or what it saw).
Answer = tuple[bool, str]


def fresh(stamp: float | None, stale_s: float, what: str) -> Answer:
    """Live while ``what`` last happened (``stamp``, a monotonic time) under ``stale_s`` ago;
    ``starting`` before it first happened."""
    if stamp is None:
        return True, "starting"
    age = time.monotonic() - stamp
    if age > stale_s:
        return False, f"{what}: not for {age:.0f} s"
    return True, f"{what}: {age:.1f} s ago"


def json_answer(start_response: StartResponse, status: str, body: object) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))])  # fmt: skip
    return [data]


def bearer_token(environ: Environ) -> str:
    """The token of ``Authorization: Bearer <token>`` (or ``Token <token>``), else ``""``."""
    scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
    return token.strip() if scheme in ("Bearer", "Token") else ""


@dataclass
class PortApp:
    """What a process answers on its port. ``check`` raises ``AuthError`` unless a token may
    read ``*``; ``None`` when authentication is off."""

    live: Callable[[], Answer]
    ready: Callable[[], Answer]
    registry: CollectorRegistry
    #: The default registry plus the detail collectors (``?detail=1``); None: no detail.
    detail: CollectorRegistry | None = None
    check: Callable[[str, str, str], None] | None = None
    #: More authenticated paths of the process (path to WSGI app).
    extra: dict[str, WsgiApp] = field(default_factory=dict)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/live", "/ready"):
            aspect = path[1:]
            ok, reason = self._probe(self.live if aspect == "live" else self.ready)
            status = "200 OK" if ok else "503 Service Unavailable"
            return json_answer(start_response, status, {aspect: ok, "reason": reason})
        if path != "/metrics" and path not in self.extra:
            paths = ", ".join(["/live", "/ready", "/metrics", *self.extra])
            body = {"code": "not-found", "message": f"the paths are {paths}"}
            return json_answer(start_response, "404 Not Found", body)
        refusal = self._refusal(environ)
        if refusal is not None:
            body = {"code": "unauthorized", "message": refusal}
            return json_answer(start_response, "401 Unauthorized", body)
        if path in self.extra:
            return self.extra[path](environ, start_response)
        query = parse_qs(environ.get("QUERY_STRING", ""))
        wanted = query.pop("detail", ["0"])[-1]
        if wanted not in ("0", "1"):
            body = {"code": "invalid-argument", "message": "detail is 0 or 1"}
            return json_answer(start_response, "400 Bad Request", body)
        registry = self.detail if wanted == "1" and self.detail is not None else self.registry
        return make_wsgi_app(registry)(environ, start_response)  # type: ignore[no-any-return]

    @staticmethod
    def _probe(probe: Callable[[], Answer]) -> Answer:
        try:
            return probe()
        except Exception as exc:  # a probe that fails says so; the port serves on
            log.exception("probe failed")
            return False, f"the probe failed: {type(exc).__name__}: {exc}"

    def _refusal(self, environ: Environ) -> str | None:
        if self.check is None:
            return None
        try:
            self.check(bearer_token(environ), "*", READ)
        except AuthError as exc:
            return f"the metrics need a delegation token for * (Authorization: Bearer ...): {exc}"
        return None


def certificate_end(path: str) -> float | None:
    """When the PEM certificate in ``path`` ends (Unix seconds); None when it does not load."""
    from cryptography import x509

    try:
        with open(path, "rb") as handle:
            return x509.load_pem_x509_certificate(handle.read()).not_valid_after_utc.timestamp()
    except (OSError, ValueError):
        return None


class CertificateEnd(Collector):
    """``millrace_tls_certificate_end_timestamp_seconds``: when the process's TLS certificate
    ends, read from its file at each scrape (a replaced certificate shows at once)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self) -> Iterable[Any]:
        end = certificate_end(self.path)
        if end is not None:
            yield GaugeMetricFamily(
                "millrace_tls_certificate_end_timestamp_seconds",
                "When the process's TLS certificate ends (Unix seconds).", value=end,
            )  # fmt: skip


def version() -> str:
    """This process's Millrace version (``unknown`` when not installed as a distribution)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("millrace")
    except PackageNotFoundError:
        return "unknown"


class BuildInfo(Collector):
    """``millrace_build_info{version, python}``: 1, the labels saying what runs."""

    def collect(self) -> Iterable[Any]:
        import platform

        family = GaugeMetricFamily(
            "millrace_build_info", "What this process runs: Millrace's and Python's versions.",
            labels=["version", "python"],
        )  # fmt: skip
        family.add_metric([version(), platform.python_version()], 1.0)
        yield family


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


class _TlsWSGIServer(ThreadingWSGIServer):
    """HTTPS: accepted sockets are wrapped at once and shake hands in their own thread."""

    tls: ssl.SSLContext

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        return self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            request.do_handshake()
        except (OSError, ssl.SSLError) as exc:
            log.debug("metrics port: TLS handshake with %s failed: %s", client_address, exc)
            return
        super().finish_request(request, client_address)


class MetricsPort:
    """``app`` served on ``host:port`` (0: any free port; ``port`` says which) from a daemon
    thread; ``close`` stops it."""

    def __init__(
        self, host: str, port: int, app: WsgiApp, tls: ssl.SSLContext | None = None
    ) -> None:
        server_class: type[ThreadingWSGIServer] = ThreadingWSGIServer
        if tls is not None:
            server_class = type("TlsWSGIServer", (_TlsWSGIServer,), {"tls": tls})
        self._server = make_server(
            host, port, app, server_class=server_class, handler_class=_QuietHandler
        )
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="millrace-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
