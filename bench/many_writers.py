"""Many small writers: sensors each appending one small event now and then (issue 49).

``--writers`` asyncio writers (``AsyncStreamManager.create_writer``, as the README shows it),
spread over ``--processes`` client processes, each writer with a routing key of its own and a
connection of its own, each appending one ``--size`` byte event every ``--period-ms`` (their
starts spread over the period), for ``--seconds`` after a warm-up. An event's latency is from
its ``write_event`` call to its future completing (durable in tier-1). Reported per writer
count: events acknowledged against events written, the latency's median, p99 and max, and the
segment store process's CPU (all threads, ``/proc/<pid>/stat``) per event over the measured
seconds, the node's own mean acknowledgement latency (arrival to acknowledgement, from its
``millrace_append_ack_latency_seconds`` metric) and the client processes' CPU (cores busy: on a
machine where they run out of CPU, their own queueing is most of what the latency shows).

Target (issue 49): 1,000 writers at one event per 100 ms each, every event acknowledged with a
p99 under 20 ms; and the largest number of such writers one node holds under that p99.

    .venv/bin/python bench/many_writers.py [--writers 250,500,1000] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.services import standalone_node  # noqa: E402
from bench.small_requests import cpu_seconds, process_running  # noqa: E402

WARM_UP_S = 5.0


async def _sensors(base: str, token: str, first: int, count: int, args: Any, start_at: float,
                   ) -> dict[str, Any]:  # fmt: skip
    from millrace.client.manager import AsyncStreamManager

    manager = AsyncStreamManager(base, token)
    writers = [manager.create_writer("bench", "many") for _ in range(count)]

    async def first_event(i: int, writer: Any) -> None:  # (connects it: the writer starts lazily)
        await (await writer.write_event(b"hello", routing_key=f"sensor-{first + i}"))

    for i in range(0, count, 50):  # (connected in steps: a thousand at once is a storm)
        await asyncio.gather(*(first_event(j, writers[j]) for j in range(i, min(i + 50, count))))
    loop = asyncio.get_running_loop()
    event = b"x" * args.size
    period = args.period_ms / 1000
    wall_to_loop = loop.time() - time.time()
    begin, end = start_at + wall_to_loop, start_at + wall_to_loop + WARM_UP_S + args.seconds
    measured_from = begin + WARM_UP_S
    latencies: list[float] = []
    written = acked = failed = 0

    def done(future: asyncio.Future[None], sent: float, measured: bool) -> None:
        nonlocal acked, failed
        if future.exception() is not None:
            failed += 1
        elif measured:
            acked += 1
            latencies.append(time.perf_counter() - sent)

    async def sensor(i: int, writer: Any) -> None:
        nonlocal written
        key = f"sensor-{first + i}"
        at = begin + period * (first + i) / args.everyone  # (all of them, spread over the period)
        while at < end:
            await asyncio.sleep(max(0.0, at - loop.time()))
            # (counted by when it was due: a late one of the warm-up stays out of the count)
            sent, measured = time.perf_counter(), at >= measured_from
            future = await writer.write_event(event, routing_key=key)
            written += measured
            future.add_done_callback(lambda f, s=sent, m=measured: done(f, s, m))
            at += period

    await asyncio.gather(*(sensor(i, w) for i, w in enumerate(writers)))
    await asyncio.gather(*(w.close() for w in writers))
    await manager.close()
    return {"written": written, "acked": acked, "failed": failed, "latencies": latencies}


def _child(base: str, token: str, first: int, count: int, args: Any, start_at: float,
           out: Any) -> None:  # fmt: skip
    from millrace.kernel.event_loop import event_loop_factory

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        out.put(runner.run(_sensors(base, token, first, count, args, start_at)))


def node_acks(store: int, token: str) -> tuple[float, float]:
    """The segment store's own acknowledgement latency so far, from its metrics: (append groups
    acknowledged, seconds from their arrival to their acknowledgement, summed)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    environ = Path(f"/proc/{store}/environ").read_bytes().split(b"\0")
    port = next(
        v.split(b"=", 1)[1] for v in environ if v.startswith(b"MILLRACE_SEGMENTSTORE_METRICS_PORT=")
    )
    asking = urllib.request.Request(
        f"http://127.0.0.1:{int(port)}/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    text = urllib.request.urlopen(asking, timeout=10).read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "millrace_append_ack_latency_seconds":
            found = {sample.name: sample.value for sample in family.samples}
            return found[f"{family.name}_count"], found[f"{family.name}_sum"]
    raise LookupError("the node exports no millrace_append_ack_latency_seconds")


def one_count(
    base: str, token: str, metrics_token: str, store: int, writers: int, args: Any
) -> dict[str, Any]:
    """Run ``writers`` sensors over ``args.processes`` processes; their figures."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    shares = [writers // args.processes + (i < writers % args.processes)
              for i in range(args.processes)]  # fmt: skip
    start_at = time.time() + 20 + writers / 10  # (time for every writer to connect)
    children, first = [], 0
    for share in shares:
        work = (base, token, first, share, argparse.Namespace(**vars(args), everyone=writers),
                start_at, out)  # fmt: skip
        child = context.Process(target=_child, args=work)
        child.start()
        children.append(child)
        first += share
    time.sleep(max(0.0, start_at + WARM_UP_S - time.time()))
    user, system = cpu_seconds(store)
    clients = sum(map(sum, (cpu_seconds(c.pid) for c in children)))
    acks, ack_seconds = node_acks(store, metrics_token)
    time.sleep(args.seconds)
    user_after, system_after = cpu_seconds(store)
    clients_after = sum(map(sum, (cpu_seconds(c.pid) for c in children)))
    acks_after, ack_seconds_after = node_acks(store, metrics_token)
    found = [out.get(timeout=300 + writers / 2) for _ in children]
    for child in children:
        child.join(30)
    latencies = sorted(x for f in found for x in f["latencies"])
    written = sum(f["written"] for f in found)
    return {
        "writers": writers,
        "written": written,
        "acked": sum(f["acked"] for f in found),
        "failed": sum(f["failed"] for f in found),
        "events_per_s": written / args.seconds,
        "median_ms": statistics.median(latencies) * 1e3 if latencies else None,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3 if latencies else None,
        "max_ms": latencies[-1] * 1e3 if latencies else None,
        "node_ack_mean_ms": (ack_seconds_after - ack_seconds) / max(acks_after - acks, 1) * 1e3,
        "node_acks_per_event": (acks_after - acks) / max(written, 1),
        "node_cpu_us_per_event": (user_after - user + system_after - system)
        / max(written, 1)
        * 1e6,
        "node_cpu_share": (user_after - user + system_after - system) / args.seconds,
        "clients_cpu_share": (clients_after - clients) / args.seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", default="250,500,1000", help="writer counts, in turn")
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--period-ms", type=float, default=100.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--segments", type=int, default=4)
    args = parser.parse_args()
    counts = [int(n) for n in args.writers.split(",")]
    if not counts or min(counts) < 1 or args.processes < 1 or args.seconds <= 0:
        parser.error("give writer counts >= 1, --processes >= 1 and --seconds > 0")
    from millrace.client.manager import StreamManager

    results = []
    with tempfile.TemporaryDirectory() as tmp, standalone_node(Path(tmp)) as (base, token, wire):
        store = process_running("segmentstore", str(wire))
        minted = subprocess.run(
            [sys.executable, "-m", "millrace.ops.cli", "mint-token", "--data-dir",
             str(Path(tmp) / "standalone"), "--access", "READ", "*"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        metrics_token = minted.stdout.strip()
        with StreamManager(base, token=token) as manager:
            manager.create_scope("bench")
            manager.create_stream("bench", "many", args.segments)
        for writers in counts:
            results.append(one_count(base, token, metrics_token, store, writers, args))
            print(json.dumps(results[-1]), file=sys.stderr)
    print(json.dumps({"args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
