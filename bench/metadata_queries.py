"""Controller metadata queries on a 1,000,000-epoch stream against a 10-epoch one.

Target (issue 3, section 7): each query on the long stream takes at most 1.2x its time on the
short one, measured in one run on SQLite and on PostgreSQL. Both streams churn the same way
(``tests.controller.history.churn``: the upper half of the key space splits, then merges back,
at every epoch; a retention cut recorded every 10 epochs; truncated just before the tail).
"Segments between cuts" asks for the same span (5 epochs before the tail to the tail) on both.

Usage::

    .venv/bin/python bench/metadata_queries.py                       # SQLite and PostgreSQL
    .venv/bin/python bench/metadata_queries.py --backends sqlite --epochs 100000

PostgreSQL is ``--postgres-url`` (default ``postgres://postgres@127.0.0.1:5432/postgres``): a
scratch database ``millrace_bench_<pid>`` is created there and dropped afterwards. Each backend
runs in a child process of its own (Django reads its database settings once). Per query, the
short and the long stream are timed alternately, ``--rounds`` rounds of ``--calls`` calls, and
the median time per call of each is printed with their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import services  # noqa: E402 (a sibling module: bench/ is not a package)

TARGET_RATIO = 1.2
#: A retention stream cut is recorded every this many epochs, on both streams: what bounds the
#: work of "size till a cut" is the distance to the nearest recorded cut (the retention job
#: records one per period), not the length of the history.
RECORD_EVERY = 10
#: "Segments between cuts" asks from a cut this many epochs before the tail, on both streams.
CUT_EPOCHS_BACK = 5


# -- child: one backend ------------------------------------------------------------------------


def _setup_django() -> Any:
    """Django set up, the tables made, a scope on a node of four containers; the scope."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    from controller_app.models import ContainerAssignment, Node, Scope
    from controller_app.models.host import Container

    scope = Scope.objects.create(name="bench")
    node = Node.objects.create(node_id="bench", host="127.0.0.1", port=12345)
    for number in range(4):
        ContainerAssignment.objects.create(
            container=Container.objects.create(number=number), node=node
        )
    return scope


def _build(scope: Any, n: int) -> tuple[Any, Any, float]:
    """A stream of ``n`` epochs of churn: (the stream, its history, seconds to store it)."""
    from django.db import connection, transaction

    from controller_app import selectors as sel
    from controller_app.models import Stream
    from tests.controller.history import History, churn

    started = time.perf_counter()
    stream = Stream.objects.create(scope=scope, name=f"churn-{n}")
    history = churn(History(stream), n, every=RECORD_EVERY, truncate_at=n - 2)
    with transaction.atomic():  # one commit, not one per row
        history.save()
    _progress(f"{connection.vendor}: {n:,} epochs stored in {time.perf_counter() - started:.0f} s")
    return sel.get_stream("bench", stream.name), history, time.perf_counter() - started


def _arguments(h: Any) -> dict[str, Any]:
    """What the queries are asked of history ``h``, computed before timing."""
    from tests.controller.history import START_TIME, STEP_MS

    n = len(h.epochs)
    return {
        "sealed": next(sid for sid, r in h.records.items() if r.sealing_epoch == n - 1),
        "time": START_TIME + (n // 2) * STEP_MS + STEP_MS // 2,
        "from": {seg.id: 10 for seg in h.epochs[-1 - CUT_EPOCHS_BACK].segment_list()},
        "to": h.cut(20),
        "open": h.current[-1].id,
    }


def _queries() -> dict[str, Callable[[Any, dict[str, Any]], Any]]:
    from controller_app import selectors as sel

    return {
        "current segments": lambda s, a: sel.current_segments(s),
        "head segments": lambda s, a: sel.head_segments(s),
        "successors": lambda s, a: sel.successors(s, a["sealed"]),
        "segments at a time": lambda s, a: sel.segments_at_time(s, a["time"]),
        "segments between cuts": lambda s, a: sel.segments_between(s, a["from"], a["to"]),
        "size till stream cut": lambda s, a: sel.size_till_stream_cut(s, a["to"]),
        "segment uri": lambda s, a: sel.segment_uri(s, a["open"]),
    }


def _time_query(query: Any, cases: Any, rounds: int, calls: int) -> dict[str, float]:
    """The median seconds of one call of ``query`` per case (short, long)."""
    times: dict[str, list[float]] = {"short": [], "long": []}
    for _ in range(rounds):
        for label, stream, asked in cases:
            query(stream, asked)  # warm
            started = time.perf_counter()
            for _ in range(calls):
                query(stream, asked)
            times[label].append((time.perf_counter() - started) / calls)
    return {label: statistics.median(found) for label, found in times.items()}


def _child(epochs: int, rounds: int, calls: int) -> None:
    scope = _setup_django()
    from django.db import connection

    short, short_history, _ = _build(scope, 10)
    long, long_history, build_seconds = _build(scope, epochs)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    cases = (("short", short, _arguments(short_history)), ("long", long, _arguments(long_history)))
    results = []
    for name, query in _queries().items():
        median = _time_query(query, cases, rounds, calls)
        results.append(
            {"query": name, "short_us": median["short"] * 1e6, "long_us": median["long"] * 1e6}
        )
        _progress(f"{connection.vendor}: {name} timed")
    found = {
        "backend": connection.vendor,
        "epochs": epochs,
        "segments": len(long_history.records),
        "build_seconds": build_seconds,
        "results": results,
    }
    print("RESULT " + json.dumps(found), flush=True)


def _progress(line: str) -> None:
    print(f"  … {line}", file=sys.stderr, flush=True)


# -- parent: run each backend, print the table -----------------------------------------------


def _run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    with services.scratch_backend(backend, args.postgres_url) as env:
        command = [sys.executable, __file__, "--child", "--epochs", str(args.epochs)]
        command += ["--rounds", str(args.rounds), "--calls", str(args.calls)]
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT ") :]))


def _print(report: dict[str, Any]) -> bool:
    print(
        f"\n{report['backend']}: {report['epochs']:,} epochs, {report['segments']:,} segment "
        f"records (stored in {report['build_seconds']:.0f} s) vs 10 epochs"
    )
    print(f"  {'query':<24} {'10 epochs µs':>13} {'long µs':>10} {'ratio':>6}  target ≤ 1.2")
    met = True
    for r in report["results"]:
        ratio = r["long_us"] / r["short_us"]
        ok = ratio <= TARGET_RATIO
        met &= ok
        print(
            f"  {r['query']:<24} {r['short_us']:>13.1f} {r['long_us']:>10.1f} {ratio:>6.2f}  "
            f"{'MET' if ok else 'NOT MET'}"
        )
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument(
        "--backends", default="sqlite,postgresql", help="comma list: sqlite, postgresql"
    )
    parser.add_argument("--postgres-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.epochs, args.rounds, args.calls)
        return 0
    print(
        f"metadata queries: {args.epochs:,} epochs vs 10; {args.rounds} rounds x {args.calls} calls"
    )
    met = True
    for backend in args.backends.split(","):
        met &= _print(_run_backend(backend.strip(), args))
    print(f"\nall targets {'MET' if met else 'NOT all met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
