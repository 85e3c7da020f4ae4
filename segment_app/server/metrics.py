"""The segment store node's metrics port (``MILLRACE_SEGMENTSTORE_METRICS_PORT``, 9092).

Both need ``Authorization: Bearer <delegation token for *>`` while authentication is on
(``millrace mint-token --access READ "*"``; the controller mints its own).

``GET /metrics``: Prometheus metrics (``prometheus-client``): per segment the append rates
over the decision window and the totals since the node started; per container its state,
epoch, cache use, tier-2 lag and tier-1 backlog; the acknowledgement latency of appends (a
histogram); and the process's own (CPU, memory, file descriptors). ``GET /traffic``: the traffic
monitor's snapshot as JSON, which the controller's auto-scaler reads each round.

With TLS (``MILLRACE_TLS_ENABLED``) the port serves HTTPS with the node's certificate; each
connection's handshake runs in its request's thread, so a slow peer holds up no other.

The HTTP server runs in a thread of its own (``wsgiref``, one thread per request); it only
reads what the event loop replaces whole (the monitor's snapshot, the store's health), so it
takes no lock on the append path.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from millrace.kernel.claims import READ, AuthError
from segment_app.server.auth import Authorizer
from segment_app.server.traffic import LATENCY_BOUNDS_S, TrafficMonitor

log = logging.getLogger(__name__)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


class _NodeCollector(Collector):
    """The traffic monitor's and the store's numbers, read at each scrape."""

    def __init__(self, traffic: TrafficMonitor, health: Callable[[], dict[str, Any]]) -> None:
        self.traffic, self.health = traffic, health

    def collect(self) -> Iterator[Any]:
        rate_events = GaugeMetricFamily(
            "millrace_segment_events_per_second",
            "Events appended per second (decision window average).",
            labels=["segment"],
        )
        rate_bytes = GaugeMetricFamily(
            "millrace_segment_bytes_per_second",
            "Bytes appended per second, event headers included (decision window average).",
            labels=["segment"],
        )
        events = CounterMetricFamily(
            "millrace_segment_events", "Events appended since the node started.", labels=["segment"]
        )
        size = CounterMetricFamily(
            "millrace_segment_bytes", "Bytes appended since the node started.", labels=["segment"]
        )
        for segment, e_rate, b_rate, _, _, _, total_events, total_bytes in self.traffic.snapshot():
            labels = [segment]
            rate_events.add_metric(labels, e_rate)
            rate_bytes.add_metric(labels, b_rate)
            events.add_metric(labels, total_events)
            size.add_metric(labels, total_bytes)
        yield from (rate_events, rate_bytes, events, size)
        running = GaugeMetricFamily(
            "millrace_container_running", "1 while the container runs.", labels=["container"]
        )
        epoch = GaugeMetricFamily(
            "millrace_container_epoch", "The container's epoch.", labels=["container"]
        )
        status = self.health()
        for number, state in (status.get("containers") or {}).items():
            running.add_metric([str(number)], 1.0 if state.get("state") == "running" else 0.0)
            epoch.add_metric([str(number)], float(state.get("epoch") or 0))
        yield from (running, epoch)
        gauges = {
            "cache_bytes": "Bytes of segment data in the container's cache (in memory).",
            "disk_cache_bytes": "Bytes of segment data in the container's on-disk cache.",
            "tier2_lag_bytes": "Bytes appended to the container and not yet in tier-2.",
            "tier1_backlog_operations": "Log operations kept in tier-1 until tier-2 has them.",
        }
        for key, text in gauges.items():
            family = GaugeMetricFamily(f"millrace_container_{key}", text, labels=["container"])
            for number, numbers in (status.get("metrics") or {}).items():
                family.add_metric([str(number)], numbers.get(key, 0.0))
            yield family
        counts, total = list(self.traffic.latency_counts), self.traffic.latency_sum
        cumulative, buckets = 0, []
        for bound, count in zip([*LATENCY_BOUNDS_S, math.inf], counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == math.inf else f"{bound:g}", cumulative))
        latency = HistogramMetricFamily(
            "millrace_append_ack_latency_seconds",
            "From a group of appends reaching the store to its acknowledgement (durable).",
        )
        latency.add_metric([], buckets, sum_value=total)
        yield latency


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


def _refusal(authorizer: Authorizer, environ: Environ) -> str | None:
    """Why the request may not read the metrics (``None``: it may): a delegation token for
    everything (``*``, READ) in ``Authorization: Bearer <token>``, when authentication is on."""
    scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
    try:
        authorizer.check(token.strip() if scheme in ("Bearer", "Token") else "", "*", READ)
    except AuthError as exc:
        return f"the metrics need a delegation token for * (Authorization: Bearer ...): {exc}"
    return None


def _json(start_response: StartResponse, status: str, body: object) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))])  # fmt: skip
    return [data]


def metrics_app(
    traffic: TrafficMonitor, health: Callable[[], dict[str, Any]], authorizer: Authorizer
) -> Callable[[Environ, StartResponse], Iterable[bytes]]:
    """The WSGI application of the metrics port."""
    registry = CollectorRegistry()
    registry.register(_NodeCollector(traffic, health))
    ProcessCollector(registry=registry)
    prometheus = make_wsgi_app(registry)

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in ("/metrics", "/traffic"):
            body = {"code": "not-found", "message": "the paths are /metrics and /traffic"}
            return _json(start_response, "404 Not Found", body)
        refusal = _refusal(authorizer, environ)
        if refusal is not None:
            return _json(start_response, "401 Unauthorized", {"code": "unauthorized",
                                                              "message": refusal})  # fmt: skip
        if path == "/traffic":
            body = {
                "windowsSeconds": list(traffic.windows_s),
                "uptimeSeconds": round(traffic.uptime_s, 3),
                "segments": traffic.describe(),
            }
            return _json(start_response, "200 OK", body)
        return prometheus(environ, start_response)  # type: ignore[no-any-return]

    return app


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


class MetricsServer:
    """The metrics port, served from a daemon thread; ``close`` stops it."""

    def __init__(
        self,
        host: str,
        port: int,
        traffic: TrafficMonitor,
        health: Callable[[], dict[str, Any]],
        authorizer: Authorizer,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        server_class: type[ThreadingWSGIServer] = ThreadingWSGIServer
        if tls is not None:
            server_class = type("TlsWSGIServer", (_TlsWSGIServer,), {"tls": tls})
        self._server = make_server(
            host, port, metrics_app(traffic, health, authorizer),
            server_class=server_class, handler_class=_QuietHandler,
        )  # fmt: skip
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="millrace-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
