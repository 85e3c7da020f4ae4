"""The small-request path: what one lone small request costs, next to Redis (issue 49).

One caller, one request at a time, each waited for, as the README shows the calls:

* ``append``: ``write_event`` of one 100 B event, then ``flush()`` (blocking writer);
* ``put``: ``KeyValueTable.put`` of one 16-byte key with a 1 KiB value (durable on return);
* ``redis``: ``HSET`` of one field with the same value on a Redis with ``appendfsync always``.

For each: the latency (median and p99 over ``--requests``), and the CPU the server process
spent per request, all its threads, read from ``/proc/<pid>/stat`` (utime + stime) before and
after: the segment store process of a ``millrace standalone`` node (embedded defaults, file
tier-1 with fdatasync), ``redis-server`` for Redis. The three are interleaved ``--rounds`` times
and the medians of the rounds reported.

Targets (issue 49): segment store CPU per lone append or put at most 100 us; a lone
``write_event`` + ``flush()`` at most 0.6 ms at the median.

    .venv/bin/python bench/small_requests.py [--requests 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.services import redis_server, standalone_node  # noqa: E402

EVENT = b"x" * 100
VALUE = bytes(range(256)) * 4
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU of process ``pid`` so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


def process_running(*words: str) -> int:
    """The pid of the process whose command line holds every one of ``words``."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                line = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if all(word.encode() in line for word in words):
                return int(entry.name)
    raise LookupError(f"no process running {words}")


def timed(pid: int, requests: int, call: Callable[[int], object]) -> dict[str, float]:
    """Latency figures (ms) of ``requests`` calls one at a time, and ``pid``'s CPU per call."""
    for i in range(50):  # (connections made and paths warm before the clock)
        call(i)
    took = []
    user, system = cpu_seconds(pid)
    for i in range(requests):
        started = time.perf_counter()
        call(i)
        took.append(time.perf_counter() - started)
    user_after, system_after = cpu_seconds(pid)
    took.sort()
    return {
        "median_ms": statistics.median(took) * 1e3,
        "p99_ms": took[int(len(took) * 0.99)] * 1e3,
        "server_cpu_us": (user_after - user + system_after - system) / requests * 1e6,
        "server_user_us": (user_after - user) / requests * 1e6,
        "server_system_us": (system_after - system) / requests * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import redis

    from millrace.client.kvt import KeyValueTableManager
    from millrace.client.manager import StreamManager

    found: dict[str, list[dict[str, float]]] = {"append": [], "put": [], "redis": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        standalone_node(Path(tmp)) as (base, token, wire),
        redis_server(Path(tmp)) as (_, redis_port, redis_pid),
    ):
        store = process_running("segmentstore", str(wire))
        with StreamManager(base, token=token) as manager:
            manager.create_scope("bench")
            manager.create_stream("bench", "st", 1)
        tables = KeyValueTableManager(base, token)
        tables.create_kvt("bench", "kv", partitions=4, primary_key_length=16)
        table = tables.open("bench", "kv")
        client = redis.Redis(host="127.0.0.1", port=redis_port)
        with StreamManager(base, token=token) as manager, manager.create_writer("bench", "st") as w:

            def append(i: int) -> None:
                w.write_event(EVENT, routing_key="k")
                w.flush()

            calls = {
                "append": (store, append),
                "put": (store, lambda i: table.put(b"key-%012d" % (i % 1000), VALUE)),
                "redis": (redis_pid, lambda i: client.hset("kv", b"key-%012d" % (i % 1000), VALUE)),
            }
            for round_ in range(args.rounds):
                for case, (pid, call) in calls.items():
                    found[case].append(timed(pid, args.requests, call))
                    print(f"round {round_ + 1} {case}: {found[case][-1]}", file=sys.stderr)
        client.close()
        tables.close()
    medians = {
        case: {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
        for case, rounds in found.items()
    }
    print(json.dumps({"requests": args.requests, "rounds": found, "median": medians}, indent=2))


if __name__ == "__main__":
    main()
