"""Key-value tables through the blocking Python client, next to redis-py on a Redis with
``appendfsync always``, in one run (issue 36's targets).

Millrace: ``millrace standalone`` on embedded defaults (file tier-1 with fsync); a table of 4
partitions and 16-byte keys; ``KeyValueTable.put`` (each durable when it returns) and ``get`` of
one key with a 1 KiB value, one call at a time from one thread; ``update`` of 100 keys of one
primary key per call (batched updates); and conditional puts (``version=`` the one the last put
returned) paced at 1,000 a second, whose latencies give the p99. Redis: ``HSET`` and ``HGET`` of
one field, one call at a time; ``HSET`` of 100 fields per call (``mapping``); and ``HSET`` paced
at 1,000 a second. Same keys, same values, same process.

    .venv/bin/python bench/kvt.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.services import redis_server, standalone_node  # noqa: E402

VALUE = bytes(random.Random(1).randrange(256) for _ in range(1024))
KEYS = 10_000
BATCH = 100
PACE_PER_S = 1000


def rate(seconds: float, op: Callable[[int], int]) -> float:
    """Items per second of ``op(i)`` (which returns how many items it did) for ``seconds``."""
    done, i = 0, 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        done += op(i)
        i += 1
    return done / (time.perf_counter() - started)


def paced_p99(seconds: float, op: Callable[[int], None]) -> tuple[float, float]:
    """(p99 latency in ms, achieved rate) of ``op`` started every 1/PACE_PER_S seconds."""
    latencies: list[float] = []
    start = time.perf_counter()
    i = 0
    while time.perf_counter() - start < seconds:
        due = start + i / PACE_PER_S
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        began = time.perf_counter()
        op(i)
        latencies.append(time.perf_counter() - max(began, due))
        i += 1
    latencies.sort()
    return latencies[int(len(latencies) * 0.99)] * 1000, i / (time.perf_counter() - start)


def key(i: int) -> bytes:
    return b"key-%012d" % (i % KEYS)


def millrace(base: str, token: str, seconds: float) -> dict[str, float]:
    from millrace.client.kvt import KeyValueTableManager, Put
    from millrace.client.manager import StreamManager

    with StreamManager(base, token) as streams:
        streams.create_scope("bench")
    with KeyValueTableManager(base, token) as manager:
        manager.create_kvt("bench", "kv", partitions=4, primary_key_length=16)
        table = manager.open("bench", "kv")
        out = {"put": rate(seconds, lambda i: (table.put(key(i), VALUE), 1)[1]),
               "get": rate(seconds, lambda i: (table.get(key(i)), 1)[1])}  # fmt: skip
        manager.create_kvt("bench", "batch", partitions=4, primary_key_length=8,
                           secondary_key_length=8)  # fmt: skip
        batched = manager.open("bench", "batch")

        def batch(i: int) -> int:
            primary = b"p%07d" % (i % 1000)
            batched.update([Put(primary, VALUE, b"s%07d" % n) for n in range(BATCH)])
            return BATCH

        out["batched"] = rate(seconds, batch)
        version = [table.put(b"conditional-key!", VALUE)]

        def conditional(i: int) -> None:
            version[0] = table.put(b"conditional-key!", VALUE, version=version[0])

        out["p99_ms"], out["paced"] = paced_p99(seconds, conditional)
    return out


def redis_side(port: int, seconds: float) -> dict[str, float]:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    out = {"put": rate(seconds, lambda i: (client.hset("kv", key(i), VALUE), 1)[1]),
           "get": rate(seconds, lambda i: (client.hget("kv", key(i)), 1)[1])}  # fmt: skip

    def batch(i: int) -> int:
        fields = {b"p%07d-s%07d" % (i % 1000, n): VALUE for n in range(BATCH)}
        client.hset("batch", mapping=fields)
        return BATCH

    out["batched"] = rate(seconds, batch)
    out["p99_ms"], out["paced"] = paced_p99(seconds, lambda i: client.hset("c", "k", VALUE))
    client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvt-bench-") as scratch:
        where = Path(scratch)
        (where / "m").mkdir()
        (where / "r").mkdir()
        with standalone_node(where / "m") as (base, token, _):
            ours = millrace(base, token, args.seconds)
        with redis_server(where / "r") as (_, port, _pid):
            theirs = redis_side(port, args.seconds)
    print(f"blocking client, one call at a time, 1 KiB values, {args.seconds:.0f} s each")
    for what, label in (("put", "durable put/s"), ("get", "get/s"),
                        ("batched", f"batched puts/s ({BATCH}/call)")):  # fmt: skip
        print(f"{label:28} Millrace {ours[what]:>10,.0f}   Redis {theirs[what]:>10,.0f}"
              f"   ({ours[what] / theirs[what]:.2f}x)")  # fmt: skip
    print(f"{'conditional put p99 at 1k/s':28} Millrace {ours['p99_ms']:>8.2f} ms "
          f"({ours['paced']:,.0f}/s)   Redis HSET {theirs['p99_ms']:.2f} ms")  # fmt: skip
    puts = ours["put"] >= theirs["put"]
    gets = ours["get"] >= 0.5 * theirs["get"]
    p99 = ours["p99_ms"] < 10 and ours["paced"] >= 0.95 * PACE_PER_S
    for name, met in (("durable puts >= 1x", puts), ("gets >= 0.5x", gets),
                      ("p99 conditional < 10 ms at 1,000/s", p99)):  # fmt: skip
        print(f"target {name}: {'MET' if met else 'NOT MET'}")


if __name__ == "__main__":
    main()
