"""One retention round and one watermark round over 10,000 streams, against their periods.

Target (issue 14, section 6): each round over 10,000 streams completes in less than its period
(``MILLRACE_RETENTION_PERIOD_S`` 300 s, ``MILLRACE_WATERMARK_PERIOD_S`` 10 s) with one worker,
on SQLite and on PostgreSQL, with a bounded number of queries per stream.

Per backend, a child process with Django set up on a scratch data directory (and a scratch
PostgreSQL database) starts a segment store node (``bench/services.py``; auth off on both
sides), creates ``--streams`` streams through the create workflow (each with a size retention
policy of 1 MiB and a timestamp aggregation timeout) and notes one writer mark on each. Then it
runs, as one worker would, the bucket tasks of one retention round and of one watermark round
(``controller_app.tasks.retention_bucket`` / ``watermark_bucket`` for every bucket, one after
the other) and reports the wall time and the database queries per stream of each. The
retention round collects a stream cut of every stream (one segment store call per segment);
the watermark round makes every stream's first watermark.

Usage::

    .venv/bin/python bench/policy_rounds.py                          # SQLite and PostgreSQL
    .venv/bin/python bench/policy_rounds.py --backends sqlite --streams 1000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import services

PERIODS_S = {"retention": 300.0, "watermark": 10.0}


def _child(count: int) -> None:
    with services.round_child_node() as store:
        from django.db import connection
        from tqdm import tqdm

        from controller_app import selectors as sel
        from controller_app import tasks
        from controller_app.workflows import marks, streams
        from controller_app.workflows.config import StreamConfig

        config = StreamConfig(
            retention_type="SIZE", retention_value=1024 * 1024, timestamp_aggregation_timeout=60_000
        )
        started = time.perf_counter()
        for i in tqdm(range(count), desc="streams", file=sys.stderr, mininterval=2):
            stream = streams.create_stream(store, "bench", f"s{i}", config)
            (segment,) = sel.current_segments(stream)
            marks.note_writer_mark("bench", f"s{i}", "w", 1000 + i, {segment.id: 0})
        build_s = time.perf_counter() - started
        report: dict[str, Any] = {"backend": connection.vendor, "streams": count,
                                  "build_seconds": build_s}  # fmt: skip
        for name, task in (("retention", tasks.retention_bucket),
                           ("watermark", tasks.watermark_bucket)):  # fmt: skip
            visited = 0
            started = time.perf_counter()
            with services.counting_queries() as queries:
                for bucket in tqdm(range(100), desc=f"{name} round", file=sys.stderr):
                    visited += max(0, task(bucket))
            report[name] = {
                "seconds": time.perf_counter() - started,
                "visited": visited,
                "queries_per_stream": queries[0] / max(visited, 1),
            }
        print("RESULT " + json.dumps(report), flush=True)


def _run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    return services.run_round_child(__file__, backend, args.postgres_url,
                                    ["--streams", str(args.streams)])  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma list")
    parser.add_argument("--postgres-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.streams)
        return 0
    met = True
    for backend in args.backends.split(","):
        report = _run_backend(backend.strip(), args)
        print(f"{report['backend']}: {report['streams']:,} streams "
              f"(created in {report['build_seconds']:.0f} s)")  # fmt: skip
        for name, period in PERIODS_S.items():
            r = report[name]
            ok = r["seconds"] < period and r["visited"] == report["streams"]
            met &= ok
            print(f"  {name} round: {r['seconds']:.1f} s for {r['visited']:,} streams, "
                  f"{r['queries_per_stream']:.1f} queries a stream; period {period:.0f} s: "
                  f"{'MET' if ok else 'NOT MET'}")  # fmt: skip
    print(f"all targets {'MET' if met else 'NOT all met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
