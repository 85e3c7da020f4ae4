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
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import services  # noqa: E402 (a sibling module: bench/ is not a package)

PERIODS_S = {"retention": 300.0, "watermark": 10.0}


def _child(count: int) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.project.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from tqdm import tqdm

    call_command("migrate", interactive=False, verbosity=0)
    from controller_app import selectors as sel
    from controller_app import tasks
    from controller_app.segment_client import register_node, segment_store
    from controller_app.workflows import marks, scopes, streams
    from controller_app.workflows.config import StreamConfig

    work = Path(os.environ["MILLRACE_DATA_DIR"]) / "node"
    with services.millrace_node(work) as (host, port, _pid):
        register_node(host=host, port=port, container_count=4)
        store = segment_store()
        scopes.create_scope("bench")
        config = StreamConfig(
            retention_type="SIZE", retention_value=1024 * 1024, timestamp_aggregation_timeout=60_000
        )
        started = time.perf_counter()
        for i in tqdm(range(count), desc="streams", file=sys.stderr, mininterval=2):
            stream = streams.create_stream(store, "bench", f"s{i}", config)
            (segment,) = sel.current_segments(stream)
            marks.note_writer_mark("bench", f"s{i}", "w", 1000 + i, {segment.id: 0})
        build_s = time.perf_counter() - started

        queries = [0]

        def count_queries(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            queries[0] += 1
            return execute(sql, params, many, context)

        report: dict[str, Any] = {"backend": connection.vendor, "streams": count,
                                  "build_seconds": build_s}  # fmt: skip
        for name, task in (("retention", tasks.retention_bucket),
                           ("watermark", tasks.watermark_bucket)):  # fmt: skip
            queries[0] = 0
            visited = 0
            started = time.perf_counter()
            with connection.execute_wrapper(count_queries):
                for bucket in tqdm(range(100), desc=f"{name} round", file=sys.stderr):
                    visited += max(0, task(bucket))
            report[name] = {
                "seconds": time.perf_counter() - started,
                "visited": visited,
                "queries_per_stream": queries[0] / max(visited, 1),
            }
        print("RESULT " + json.dumps(report), flush=True)


def _run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    with services.scratch_backend(backend, args.postgres_url) as env:
        env["MILLRACE_AUTH"] = "off"
        command = [sys.executable, __file__, "--child", "--streams", str(args.streams)]
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT ") :]))


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
