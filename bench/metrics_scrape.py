"""A Prometheus scrape of a node with 10,000 segments that took appends: time and size.

Target (issue 47): a scrape of the default metrics of a node with 10,000 segments under
200 ms and under 1 MB.

A ``millrace standalone`` node (embedded defaults, on spare ports) gets ``--streams`` streams
of ``--segments`` segments through the Python client, as the README shows, and one event
written to every segment (a routing key chosen to land in each), so that each segment has
traffic the metrics report. ``millrace scrape-config`` writes the scrape token. Then each
endpoint is asked ``--scrapes`` times as Prometheus asks it (``GET`` with the bearer token):
the segment store's ``/metrics`` (the default: per stream) and ``/metrics?detail=1`` (per
segment too), and the controller's ``/metrics``. Reported: the median and slowest time of a
whole answer, and its size.

Usage::

    .venv/bin/python bench/metrics_scrape.py                     # 100 streams x 100 segments
    .venv/bin/python bench/metrics_scrape.py --streams 10 --segments 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import services

from millrace.client.manager import StreamManager
from millrace.client.routing import key_point


def keys_for(segments: int) -> list[str]:
    """One routing key per uniform key range of ``segments`` segments."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < segments:
        key = f"k{n}"
        found.setdefault(int(key_point(key) * segments), key)
        n += 1
    return [found[i] for i in range(segments)]


def scrape(url: str, token: str, times: int) -> dict[str, float]:
    took, size = [], 0
    for _ in range(times):
        asked = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        started = time.perf_counter()
        with urllib.request.urlopen(asked, timeout=60) as answer:
            size = len(answer.read())
        took.append(time.perf_counter() - started)
    return {"median_ms": statistics.median(took) * 1000, "max_ms": max(took) * 1000,
            "bytes": size}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--segments", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work, metrics_port = Path(tmp), services.spare_port()
        env = {"MILLRACE_SEGMENTSTORE_METRICS_PORT": str(metrics_port)}
        with services.standalone_node(work, env) as (base, token, _):
            keys = keys_for(args.segments)
            with StreamManager(base, token=token) as manager:
                manager.create_scope("bench")
                started = time.monotonic()
                for i in range(args.streams):
                    manager.create_stream("bench", f"s{i}", args.segments)
                    with manager.create_writer("bench", f"s{i}") as writer:
                        for key in keys:
                            writer.write_event(b"x" * 100, routing_key=key)
                        writer.flush()
                    print(f"\rstreams {i + 1}/{args.streams}", end="", file=sys.stderr)
                print(f" ({time.monotonic() - started:.0f} s)", file=sys.stderr)
            subprocess.run(
                [sys.executable, "-m", "millrace.ops.cli", "scrape-config", "--url", base,
                 "--data-dir", str(work / "standalone"), "--token-file", str(work / "token")],
                check=True, capture_output=True, env={**os.environ},
            )  # fmt: skip
            scrape_token = (work / "token").read_text().strip()
            store = f"http://127.0.0.1:{metrics_port}/metrics"
            result = {
                "segments": args.streams * args.segments,
                "segmentstore_default": scrape(store, scrape_token, args.scrapes),
                "segmentstore_detail": scrape(store + "?detail=1", scrape_token, args.scrapes),
                "controller_default": scrape(f"{base}/metrics", scrape_token, args.scrapes),
            }
            print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
