"""Manual scale latency: from the REST request to the new epoch being current.

Target (issue 3): at most 1 s median with a real worker. The benchmark starts
``millrace standalone`` on a temporary data directory and free ports (embedded defaults:
SQLite, filesystem broker, file tier-1, filesystem tier-2), creates a stream, then alternately
splits and merges its upper segment ``--scales`` times through ``POST .../scale`` (which
returns once the worker has made the new epoch current) and prints the latency of each
request's round trip: median, p90, max, with a text histogram.

Usage: ``.venv/bin/python bench/scale_latency.py [--scales 40]``
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from services import rest_call as _call

TARGET_MEDIAN_SECONDS = 1.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="millrace-scale-") as scratch:
        data_dir = Path(scratch) / "data"
        http, wire = _free_port(), _free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        node = subprocess.Popen(
            [sys.executable, "-m", "millrace.ops.cli", "standalone", "--data-dir", str(data_dir),
             "--http-port", str(http), "--segmentstore-port", str(wire)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            assert node.stdout is not None
            for line in node.stdout:
                if "Millrace is running" in line:
                    break
            else:
                print("standalone did not start", file=sys.stderr)
                return 1
            return _measure(f"http://127.0.0.1:{http}", data_dir, args.scales)
        finally:
            os.killpg(node.pid, signal.SIGTERM)
            node.wait(60)


def _measure(base: str, data_dir: Path, scales: int) -> int:
    token = (data_dir / "admin-token").read_text().strip()
    _call(base, token, "POST", "/v1/scopes", {"scopeName": "bench"})
    stream = {"streamName": "s", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2}}
    _call(base, token, "POST", "/v1/scopes/bench/streams", stream)
    path = "/v1/scopes/bench/streams/s"
    latencies = []
    for i in range(scales):
        upper = [s for s in _call(base, token, "GET", f"{path}/segments")["segments"]
                 if s["keyStart"] >= 0.5]  # fmt: skip
        if len(upper) == 1:
            body = {"sealedSegments": [upper[0]["segmentId"]],
                    "newRanges": [[0.5, 0.75], [0.75, 1.0]]}  # fmt: skip
        else:
            body = {"sealedSegments": [s["segmentId"] for s in upper], "newRanges": [[0.5, 1.0]]}
        started = time.perf_counter()
        result = _call(base, token, "POST", f"{path}/scale", body)
        latencies.append(time.perf_counter() - started)
        assert result["status"] == "COMPLETED" and result["epoch"] == i + 1, result
        print(f"  scale {i + 1:3d}: {latencies[-1] * 1000:7.1f} ms", file=sys.stderr)
    median = statistics.median(latencies)
    p90 = statistics.quantiles(latencies, n=10)[-1]
    print(f"\nmanual scale, REST request to new epoch current ({scales} scales, real worker):")
    print(f"  median {median * 1000:.0f} ms   p90 {p90 * 1000:.0f} ms   "
          f"max {max(latencies) * 1000:.0f} ms   min {min(latencies) * 1000:.0f} ms")  # fmt: skip
    _histogram(latencies)
    met = median <= TARGET_MEDIAN_SECONDS
    print(f"  target median ≤ {TARGET_MEDIAN_SECONDS:.0f} s: {'MET' if met else 'NOT MET'}")
    return 0


def _histogram(latencies: list[float]) -> None:
    edges = [0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, float("inf")]
    low = 0.0
    for edge in edges:
        count = sum(1 for x in latencies if low <= x < edge)
        label = f"{low * 1000:.0f}-{edge * 1000:.0f} ms" if edge != float("inf") else "≥ 2000 ms"
        print(f"  {label:>14} | {'#' * count} {count}")
        low = edge


if __name__ == "__main__":
    sys.exit(main())
