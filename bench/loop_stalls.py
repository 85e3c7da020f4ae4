"""Run a command of ``millrace`` with every asyncio callback timed: where the event loop stalls.

Usage (``append_throughput.py --profile loop-stalls`` does this for the node)::

    python bench/loop_stalls.py OUT.json segmentstore --data-dir D --port 0

Each callback the event loop runs (``asyncio.Handle._run``: task steps, I/O callbacks, timers) is
timed; at exit OUT.json gets a histogram of callback durations and, for the callbacks over
``SLOW_MS``, their total time by callback name and how much of it the loop's thread was on
the CPU (the rest it waited: for the GIL held by a tier thread, or preempted by the OS). A
callback that runs long delays every ack behind it: this is where ack-latency outliers come
from when the CPU is not the limit. ``MILLRACE_BENCH_SWITCH_INTERVAL`` (seconds) sets
``sys.setswitchinterval`` first (the GIL hand-over period, default 0.005), to test whether the
waits are GIL hand-overs.
Diagnostic only: the timing costs about a microsecond per callback.
"""

from __future__ import annotations

import asyncio.events
import collections
import json
import os
import sys
import time
from typing import Any

SLOW_MS = 2.0
BUCKETS_MS = (0.1, 0.5, 1, 2, 5, 10, 20, 50, 100, 1e9)


def _name(handle: Any) -> str:
    callback = getattr(handle, "_callback", None)
    callback = getattr(callback, "func", callback)  # functools.partial
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        return f"task {getattr(coro, '__qualname__', coro)}"
    return getattr(callback, "__qualname__", repr(callback))


def main(argv: list[str]) -> int:
    out_path, args = argv[0], argv[1:]
    interval = os.environ.get("MILLRACE_BENCH_SWITCH_INTERVAL")
    if interval:
        sys.setswitchinterval(float(interval))
    counts = [0] * len(BUCKETS_MS)
    slow_ms: collections.Counter[str] = collections.Counter()
    slow_n: collections.Counter[str] = collections.Counter()
    slow_cpu_ms: collections.Counter[str] = collections.Counter()
    original = asyncio.events.Handle._run

    def timed_run(self: Any) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        original(self)
        ms = (time.perf_counter() - t0) * 1e3
        for i, bound in enumerate(BUCKETS_MS):
            if ms <= bound:
                counts[i] += 1
                break
        if ms > SLOW_MS:
            name = _name(self)
            slow_ms[name] += ms
            slow_n[name] += 1
            slow_cpu_ms[name] += (time.thread_time() - c0) * 1e3

    asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]
    from millrace.ops.cli import main as millrace_main

    try:
        return millrace_main(args)
    finally:
        report = {
            "histogram_ms": {f"<= {b:g}": n for b, n in zip(BUCKETS_MS, counts, strict=True)},
            "slow_callbacks": [
                {
                    "callback": name,
                    "count": slow_n[name],
                    "total_ms": round(total, 1),
                    "on_cpu_ms": round(slow_cpu_ms[name], 1),
                }
                for name, total in slow_ms.most_common(20)
            ],
        }
        with open(out_path, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
