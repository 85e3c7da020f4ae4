"""One reader-group lag round over 1,000 reader groups, against its period.

Target (issue 47): the lag of 1,000 reader groups computed within the sync interval (the lag
round's period, ``MILLRACE_LAG_PERIOD_S``, 10 s by default).

Per backend, a child process with Django set up on a scratch data directory (and a scratch
PostgreSQL database) starts a segment store node (``bench/services.py``; auth off on both
sides) and creates ``--streams`` streams of ``--segments`` segments. It then creates
``--groups`` reader groups, each reading one stream (``i % streams``) from its head, with one
reader that joined. It runs the lag round (``controller_app.lag.lag_round``, as the beat's task
does) ``--rounds`` times and reports each round's wall time and database queries per group.
The first round makes each group's row; the later ones are the steady state. Each round asks
the segment store once for each distinct segment's length, and reads the nodes' traffic once.

Usage::

    .venv/bin/python bench/lag_round.py                          # SQLite and PostgreSQL
    .venv/bin/python bench/lag_round.py --backends sqlite --groups 200
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

PERIOD_S = 10.0


def _child(args: argparse.Namespace) -> None:
    with services.round_child_node() as store:
        from django.db import connection
        from tqdm import tqdm

        from controller_app import lag
        from controller_app.segment_client import read_traffic
        from controller_app.workflows import reader_groups, streams
        from controller_app.workflows.config import StreamConfig

        for i in tqdm(range(args.streams), desc="streams", file=sys.stderr, mininterval=2):
            streams.create_stream(store, "bench", f"s{i}", StreamConfig(min_segments=args.segments))
        for i in tqdm(range(args.groups), desc="groups", file=sys.stderr, mininterval=2):
            config = reader_groups.ReaderGroupConfig(streams={f"bench/s{i % args.streams}": "head"})
            reader_groups.create_reader_group(store, "bench", f"g{i}", config)
            reader_groups.add_reader("bench", f"g{i}", "r1")
        rounds = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            with services.counting_queries() as queries:
                measured = lag.lag_round(store, read_traffic)
            rounds.append({"seconds": time.perf_counter() - started, "groups": measured,
                           "queries_per_group": queries[0] / max(measured, 1)})  # fmt: skip
        print("RESULT " + json.dumps({"backend": connection.vendor, "rounds": rounds}), flush=True)


def _run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = ["--streams", str(args.streams), "--segments", str(args.segments),
            "--groups", str(args.groups), "--rounds", str(args.rounds)]  # fmt: skip
    return services.run_round_child(__file__, backend, args.postgres_url, argv)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma list")
    parser.add_argument("--postgres-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return 0
    met = True
    for backend in args.backends.split(","):
        report = _run_backend(backend.strip(), args)
        print(f"{report['backend']}: {args.groups:,} reader groups over {args.streams} streams "
              f"of {args.segments} segments")  # fmt: skip
        for number, found in enumerate(report["rounds"], 1):
            ok = found["seconds"] < PERIOD_S and found["groups"] == args.groups
            met &= ok
            print(f"  round {number}: {found['seconds']:.2f} s, "
                  f"{found['queries_per_group']:.1f} queries a group; period {PERIOD_S:.0f} s: "
                  f"{'MET' if ok else 'NOT MET'}")  # fmt: skip
    print(f"steady rounds {'MET' if met else 'NOT all met'} the period")
    return 0


if __name__ == "__main__":
    sys.exit(main())
