"""The traffic monitor's averages (a fake clock) and the metrics port (a real HTTP server,
called as Prometheus or the controller call it: a bearer token, no cookie)."""

from __future__ import annotations

import json
import math
import time
import urllib.request

import pytest

from millrace.kernel.claims import READ, TokenVerifier, mint_token
from segment_app.server.metrics import MetricsServer
from segment_app.server.traffic import TrafficMonitor

SECRET = "traffic-tests-secret-0123456789abcdef"


def _get(url: str, token: str) -> urllib.request.Request:
    return urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _entry(monitor: TrafficMonitor, segment: str) -> dict:
    return next(e for e in monitor.describe() if e["segment"] == segment)


def test_rates_follow_the_load_over_the_window() -> None:
    clock = Clock()
    monitor = TrafficMonitor(10.0, clock=clock)
    for _ in range(10):  # 5,000 events/s of 100 B for one window
        monitor.record("sc/st/0.#epoch.0", 5000, 500_000)
        clock.now += 1.0
        monitor.tick()
    found = _entry(monitor, "sc/st/0.#epoch.0")
    expected = 5000 * (1 - math.exp(-1.0))  # an average with a 10 s time constant, after 10 s
    assert found["eventsPerSecond"] == pytest.approx(expected, rel=1e-3)
    assert found["bytesPerSecond"] == pytest.approx(expected * 100, rel=1e-3)
    assert found["events"] == 50_000 and found["seenForSeconds"] == pytest.approx(10.0)
    assert set(found["windows"]) == {"10", "120", "300", "600", "1200"}
    assert found["windows"]["10"] == [found["eventsPerSecond"], found["bytesPerSecond"]]
    # The long windows fold every 10 s: one fold of 10 s at 5,000 events/s so far.
    assert found["windows"]["120"][0] == pytest.approx(5000 * (1 - math.exp(-10 / 120)), rel=1e-3)
    for _ in range(60):  # the load stops: the average decays
        clock.now += 1.0
        monitor.tick()
    assert _entry(monitor, "sc/st/0.#epoch.0")["eventsPerSecond"] < 10
    for _ in range(200):  # idle for long: forgotten
        clock.now += 1.0
        monitor.tick()
    assert monitor.snapshot() == []


def test_transaction_segments_are_not_counted() -> None:
    clock = Clock()
    monitor = TrafficMonitor(10.0, clock=clock)
    monitor.record("sc/st/0.#epoch.0#transaction." + "0" * 32, 10, 1000)
    clock.now += 1
    monitor.tick()
    assert monitor.snapshot() == []


def test_the_metrics_port_serves_traffic_and_prometheus_metrics() -> None:
    clock = Clock()
    monitor = TrafficMonitor(5.0, clock=clock)
    monitor.record("sc/st/0.#epoch.0", 10, 1000)
    clock.now += 1
    monitor.tick()
    monitor.record_latency(0.003)
    monitor.record_latency(0.3)
    health = {
        "containers": {"0": {"state": "running", "epoch": 3}},
        "metrics": {"0": {"cache_bytes": 10.0, "tier2_lag_bytes": 5.0,
                          "tier1_backlog_operations": 2.0}},
    }  # fmt: skip
    server = MetricsServer("127.0.0.1", 0, monitor, lambda: health, TokenVerifier(SECRET))
    try:
        base = f"http://127.0.0.1:{server.port}"
        with pytest.raises(urllib.error.HTTPError) as refused:  # no token
            urllib.request.urlopen(f"{base}/traffic", timeout=10)
        assert refused.value.code == 401
        narrow = mint_token(SECRET, "sc/st/", READ, 60)  # a stream's token is not enough
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(_get(f"{base}/metrics", narrow), timeout=10)
        assert refused.value.code == 401 and b"does not cover" in refused.value.read()
        token = mint_token(SECRET, "*", READ, 60)
        with urllib.request.urlopen(_get(f"{base}/traffic", token), timeout=10) as response:
            traffic = json.loads(response.read())
        assert traffic["windowsSeconds"][0] == 5.0 and traffic["uptimeSeconds"] == 1.0
        assert [e["segment"] for e in traffic["segments"]] == ["sc/st/0.#epoch.0"]
        with urllib.request.urlopen(_get(f"{base}/metrics", token), timeout=10) as response:
            text = response.read().decode()
        assert 'millrace_stream_events_total{stream="sc/st"} 10.0' in text
        assert "millrace_segment_events_total" not in text  # the detail, when asked
        detail = _get(f"{base}/metrics?detail=1", token)
        with urllib.request.urlopen(detail, timeout=10) as response:
            text = response.read().decode()
        assert 'millrace_segment_events_total{segment="sc/st/0.#epoch.0"} 10.0' in text
        assert 'millrace_stream_events_total{stream="sc/st"} 10.0' in text
        assert 'millrace_container_epoch{container="0"} 3.0' in text
        assert 'millrace_container_tier2_lag_bytes{container="0"} 5.0' in text
        assert 'millrace_append_ack_latency_seconds_bucket{le="0.005"} 1.0' in text
        assert 'millrace_append_ack_latency_seconds_bucket{le="+Inf"} 2.0' in text
        assert "process_cpu_seconds_total" in text
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/nothing", timeout=10)
        assert missing.value.code == 404
    finally:
        server.close()


def _probe(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # no credentials
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_metrics_port_answers_the_nodes_own_probes_without_credentials() -> None:
    monitor = TrafficMonitor(5.0)
    health: dict = {
        "containers": {"0": {"state": "running"}, "1": {"state": "not assigned"}},
        "disk": {"usedPercent": 50.0, "limitPercent": 95, "freeBytes": 10, "refusing": False},
        "tickedAt": time.monotonic(),
    }
    server = MetricsServer("127.0.0.1", 0, monitor, lambda: health, TokenVerifier(SECRET))
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert _probe(f"{base}/ready") == (200, {"ready": True, "reason": "1 containers running"})
        assert _probe(f"{base}/live")[0] == 200
        health["containers"]["0"] = {"state": "recovering"}
        assert _probe(f"{base}/ready") == (
            503,
            {"ready": False, "reason": "containers not running: 0 recovering"},
        )
        health["containers"]["0"] = {"state": "running"}
        health["disk"]["refusing"] = True
        status, body = _probe(f"{base}/ready")
        assert status == 503 and "disk" in body["reason"]
        health["tickedAt"] = time.monotonic() - 30  # a loop that stopped ticking
        status, body = _probe(f"{base}/live")
        assert status == 503 and body["reason"] == "the event loop ticked: not for 30 s"
        assert _probe(f"{base}/ready")[0] == 503
        token = mint_token(SECRET, "*", READ, 60)
        with urllib.request.urlopen(_get(f"{base}/metrics", token), timeout=10) as response:
            text = response.read().decode()
        assert "millrace_disk_used_ratio 0.5" in text
        assert "millrace_disk_refusing_appends 1.0" in text
        assert 'millrace_container_running{container="1"}' not in text  # another node's
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(_get(f"{base}/metrics?detail=yes", token), timeout=10)
        assert bad.value.code == 400
    finally:
        server.close()
