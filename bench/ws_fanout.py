"""WebSocket fan-out: many tail readers of one stream on one node, as programs subscribe.

Starts ``millrace standalone`` (embedded defaults) on spare ports, creates a stream of one
segment, opens ``--subscribers`` WebSocket subscriptions to it the way the README's tail reader
does (Python's ``websockets``, no ``Origin``, the token in the query string, ``from=tail``),
then writes ``--events`` events with the Python client and times how long until every
subscriber has received every event. Prints, per run: deliveries per second (subscribers x
events / time from the first write to the last delivery), the delivery latency of the last
event (p50 and p99 over subscribers), and the controller's resident memory per subscriber (its
RSS with the subscribers minus before, divided by their number). Each run has a node of its own.

    .venv/bin/python bench/ws_fanout.py [--subscribers 1000] [--events 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from millrace.client.manager import StreamManager  # noqa: E402
from tests.acceptance.standalone_node import READY_LINE, Standalone, free_ports  # noqa: E402


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class Subscriber:
    def __init__(self) -> None:
        self.received = 0
        self.done_at = 0.0
        self.subscribed = asyncio.Event()
        self.finished = asyncio.Event()


async def subscribe(url: str, sub: Subscriber, expected: int) -> None:
    import websockets

    async with websockets.connect(url, max_queue=None, open_timeout=60) as ws:
        async for raw in ws:
            message = json.loads(raw)
            if message["type"] == "subscribed":
                sub.subscribed.set()
            elif message["type"] == "events":
                sub.received += len(message["events"])
                if sub.received >= expected:
                    sub.done_at = time.perf_counter()
                    sub.finished.set()
                    return


async def one_run(node: Standalone, scope: str, subscribers: int, events: int) -> dict[str, Any]:
    controller = node.pid_of("controller")
    assert controller is not None
    manager = StreamManager(node.base, token=node.token)
    stream = f"fan{int(time.time() * 1000) % 10**9}"
    manager.create_stream(scope, stream, initial_segments=1)
    ws = node.base.replace("http", "ws", 1)
    url = f"{ws}/ws/streams/{scope}/{stream}?from=tail&token={node.token}"
    before = rss_bytes(controller)
    subs = [Subscriber() for _ in range(subscribers)]
    tasks = []
    for i, sub in enumerate(subs):
        tasks.append(asyncio.create_task(subscribe(url, sub, events)))
        if i % 50 == 49:
            await asyncio.sleep(0.05)  # a burst of handshakes, not all at once
    await asyncio.wait_for(asyncio.gather(*(s.subscribed.wait() for s in subs)), 300)
    await asyncio.sleep(2)
    during = rss_bytes(controller)
    writer = manager.create_writer(scope, stream)
    started = time.perf_counter()
    await asyncio.to_thread(lambda: [writer.write_event(f"e{i}") for i in range(events)])
    await asyncio.to_thread(writer.flush)
    await asyncio.wait_for(asyncio.gather(*(s.finished.wait() for s in subs)), 600)
    elapsed = max(s.done_at for s in subs) - started
    latencies = sorted(s.done_at - started for s in subs)
    await asyncio.gather(*tasks, return_exceptions=True)
    writer.close()
    manager.close()
    return {
        "deliveries_per_s": subscribers * events / elapsed,
        "seconds": elapsed,
        "last_event_p50_ms": 1000 * statistics.median(latencies),
        "last_event_p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "controller_rss_mb": during / 2**20,
        "rss_per_subscriber_kib": (during - before) / subscribers / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    runs = []
    for run in range(args.repeat):
        # A fresh node per run: memory freed by an earlier run's subscribers would be reused.
        with tempfile.TemporaryDirectory(prefix="fanout-") as tmp:
            node = Standalone(Path(tmp) / "data", *free_ports(2))
            try:
                node.wait_for(READY_LINE)
                manager = StreamManager(node.base, token=node.token)
                manager.create_scope("bench")
                manager.close()
                result = asyncio.run(one_run(node, "bench", args.subscribers, args.events))
                node.stop()
            finally:
                node.kill()
        runs.append(result)
        print(f"run {run + 1}: " + ", ".join(f"{k} {v:,.1f}" for k, v in result.items()),
              flush=True)  # fmt: skip
    print(f"{args.subscribers} subscribers x {args.events} events, median of {len(runs)}:")
    for key in runs[0]:
        print(f"  {key:<24} {statistics.median(r[key] for r in runs):,.1f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
