"""The segment store node's metrics port (``MILLRACE_SEGMENTSTORE_METRICS_PORT``, 9093).

``GET /live`` and ``GET /ready`` are the node's own probes, without credentials: live while
its event loop ticks (the traffic monitor's tick, every second; stale after
``LIVE_STALE_SECONDS``), ready while every container it should run is running and the disk
takes appends. The other paths need ``Authorization: Bearer <delegation token for *>`` while
authentication is on (``millrace mint-token --access READ "*"``; the controller mints its own).

``GET /metrics``: Prometheus metrics (``prometheus-client``). By default per stream the append
rates over the decision window and the totals since the node started; per container its state,
epoch, cache use, tier-2 lag and tier-1 backlog; the disk; the acknowledgement latency of
appends (a histogram); and the process's own (CPU, memory, file descriptors).
``GET /metrics?detail=1`` adds the same figures per segment. ``GET /traffic``: the traffic
monitor's snapshot as JSON, which the controller's auto-scaler reads each round.

The port (``millrace.kernel.metrics_port``) runs in threads of its own; it only reads what the
event loop replaces whole (the monitor's snapshot, the store's health), so it takes no lock on
the append path.
"""

from __future__ import annotations

import math
import ssl
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from millrace.kernel.metrics_port import (
    Answer,
    BuildInfo,
    CertificateEnd,
    MetricsPort,
    PortApp,
    fresh,
    json_answer,
)
from segment_app.server.auth import Authorizer
from segment_app.server.traffic import LATENCY_BOUNDS_S, TrafficMonitor

Environ = dict[str, Any]
StartResponse = Callable[..., Any]

#: The node is not live when its event loop has not ticked for this long.
LIVE_STALE_SECONDS = 10.0

_RATES = (
    ("events_per_second", "Events appended per second (decision window average)."),
    ("bytes_per_second", "Bytes appended per second, event headers included (decision window"
                         " average)."),
)  # fmt: skip
_TOTALS = (
    ("events", "Events appended since the node started."),
    ("bytes", "Bytes appended since the node started, event headers included."),
)


def stream_of(segment: str) -> str:
    """``scope/stream`` of a qualified segment name (a transaction's too)."""
    return segment.rsplit("/", 1)[0] if segment.count("/") >= 2 else segment


def _traffic_families(kind: str, labels: list[str]) -> list[Any]:
    return [
        *(GaugeMetricFamily(f"millrace_{kind}_{name}", text, labels=labels)
          for name, text in _RATES),
        *(CounterMetricFamily(f"millrace_{kind}_{name}", text, labels=labels)
          for name, text in _TOTALS),
    ]  # fmt: skip


class _StreamTraffic(Collector):
    """The traffic monitor's figures summed per stream (the default: one series per stream)."""

    def __init__(self, traffic: TrafficMonitor) -> None:
        self.traffic = traffic

    def collect(self) -> Iterator[Any]:
        sums: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        for segment, e_rate, b_rate, _, _, _, events, size in self.traffic.snapshot():
            found = sums[stream_of(segment)]
            found[0] += e_rate
            found[1] += b_rate
            found[2] += events
            found[3] += size
        families = _traffic_families("stream", ["stream"])
        for stream, figures in sums.items():
            for family, value in zip(families, figures, strict=True):
                family.add_metric([stream], value)
        yield from families


class _SegmentTraffic(Collector):
    """The same per segment (``?detail=1``)."""

    def __init__(self, traffic: TrafficMonitor) -> None:
        self.traffic = traffic

    def collect(self) -> Iterator[Any]:
        families = _traffic_families("segment", ["segment"])
        for segment, e_rate, b_rate, _, _, _, events, size in self.traffic.snapshot():
            for family, value in zip(families, (e_rate, b_rate, events, size), strict=True):
                family.add_metric([segment], value)
        yield from families


_CONTAINER_GAUGES = {
    "cache_bytes": "Bytes of segment data in the container's cache (in memory).",
    "disk_cache_bytes": "Bytes of segment data in the container's on-disk cache.",
    "tier2_lag_bytes": "Bytes appended to the container and not yet in tier-2.",
    "tier1_backlog_operations": "Log operations kept in tier-1 until tier-2 has them.",
}


class _NodeCollector(Collector):
    """The store's containers, its disk and the append latency, read at each scrape."""

    def __init__(self, traffic: TrafficMonitor, health: Callable[[], dict[str, Any]]) -> None:
        self.traffic, self.health = traffic, health

    def collect(self) -> Iterator[Any]:
        status = self.health()
        yield from self._containers(status)
        yield from self._disk(status.get("disk") or {})
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

    @staticmethod
    def _containers(status: dict[str, Any]) -> Iterator[Any]:
        running = GaugeMetricFamily(
            "millrace_container_running", "1 while the container runs.", labels=["container"]
        )
        epoch = GaugeMetricFamily(
            "millrace_container_epoch", "The container's epoch.", labels=["container"]
        )
        for number, state in (status.get("containers") or {}).items():
            if state.get("state") == "not assigned":
                continue  # another node's
            running.add_metric([str(number)], 1.0 if state.get("state") == "running" else 0.0)
            epoch.add_metric([str(number)], float(state.get("epoch") or 0))
        yield from (running, epoch)
        for key, text in _CONTAINER_GAUGES.items():
            family = GaugeMetricFamily(f"millrace_container_{key}", text, labels=["container"])
            for number, numbers in (status.get("metrics") or {}).items():
                family.add_metric([str(number)], numbers.get(key, 0.0))
            yield family

    @staticmethod
    def _disk(disk: dict[str, Any]) -> Iterator[Any]:
        if "usedPercent" not in disk:
            return
        yield GaugeMetricFamily(
            "millrace_disk_used_ratio",
            "Used share of the data directory's filesystem (data waiting for a tier-2 on the"
            " same disk counted as used).", value=disk["usedPercent"] / 100,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "millrace_disk_limit_ratio",
            "The share above which appends are refused (MILLRACE_DISK_FULL_PERCENT).",
            value=disk["limitPercent"] / 100,
        )
        yield GaugeMetricFamily(
            "millrace_disk_free_bytes", "Bytes free on the data directory's filesystem.",
            value=disk["freeBytes"],
        )  # fmt: skip
        yield GaugeMetricFamily(
            "millrace_disk_refusing_appends", "1 while appends are refused for the disk.",
            value=1.0 if disk["refusing"] else 0.0,
        )  # fmt: skip


def node_live(health: Callable[[], dict[str, Any]]) -> Answer:
    """Live while the event loop ticks: it replaces the status each second."""
    return fresh(health().get("tickedAt"), LIVE_STALE_SECONDS, "the event loop ticked")


def node_ready(health: Callable[[], dict[str, Any]]) -> Answer:
    """Ready while every container the node should run is running and the disk takes appends."""
    status = health()
    live, why = node_live(health)
    if not live:
        return False, why
    mine = {
        number: found.get("state")
        for number, found in (status.get("containers") or {}).items()
        if found.get("state") != "not assigned"
    }
    down = sorted((n for n, state in mine.items() if state != "running"), key=int)
    if down:
        states = ", ".join(f"{n} {mine[n]}" for n in down)
        return False, f"containers not running: {states}"
    if (status.get("disk") or {}).get("refusing"):
        return False, "appends refused: the disk is over its limit"
    return True, f"{len(mine)} containers running"


def metrics_app(
    traffic: TrafficMonitor,
    health: Callable[[], dict[str, Any]],
    authorizer: Authorizer,
    certificate: str | None = None,
) -> PortApp:
    """The WSGI application of the metrics port (``certificate``: the node's TLS certificate
    file, whose end it exports)."""
    registry, detail = CollectorRegistry(), CollectorRegistry()
    node = _NodeCollector(traffic, health)
    for each in (registry, detail):
        each.register(node)
        each.register(_StreamTraffic(traffic))
        each.register(BuildInfo())
        ProcessCollector(registry=each)
        if certificate:
            each.register(CertificateEnd(certificate))
    detail.register(_SegmentTraffic(traffic))

    def traffic_json(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        body = {
            "windowsSeconds": list(traffic.windows_s),
            "uptimeSeconds": round(traffic.uptime_s, 3),
            "segments": traffic.describe(),
        }
        return json_answer(start_response, "200 OK", body)

    return PortApp(
        live=lambda: node_live(health), ready=lambda: node_ready(health),
        registry=registry, detail=detail,
        check=authorizer.check,
        extra={"/traffic": traffic_json},
    )  # fmt: skip


class MetricsServer(MetricsPort):
    """The metrics port, served from a daemon thread; ``close`` stops it."""

    def __init__(
        self,
        host: str,
        port: int,
        traffic: TrafficMonitor,
        health: Callable[[], dict[str, Any]],
        authorizer: Authorizer,
        tls: ssl.SSLContext | None = None,
        certificate: str | None = None,
    ) -> None:
        super().__init__(host, port, metrics_app(traffic, health, authorizer, certificate), tls)
