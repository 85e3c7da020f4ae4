"""Pravega's official Python client (PyPI ``pravega`` 0.3.8, Rust inside) writing to Millrace,
next to Millrace's own blocking writer, in one run against one node.

The node is ``millrace standalone`` on embedded defaults (SQLite, file tier-1 with fsync,
filesystem tier-2). Each workload writes to a new stream of 6 segments, 100-byte events over 60
routing keys, every event durable when the timing stops:

* ``millrace``: Millrace's client as the README shows it (``write_event`` then ``flush``);
* ``pravega write_event``: the official client as its README shows it: ``write_event`` blocks
  until that event is acknowledged (one event in flight);
* ``pravega write_event_async``: the official client's futures, all awaited at the end;
* ``pravega reader group``: the events of the async run read back by one reader of a reader
  group (``get_segment_slice_async``).

Next to each rate: the CPU seconds the segment store process used meanwhile, per second of the
run: well under 1 means the node waited for the client, not the other way round.

    .venv/bin/python bench/official_client.py [--events 200000] [--blocking-events 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.services import write_and_read  # noqa: E402
from tests.acceptance.standalone_node import READY_LINE, Standalone, free_ports  # noqa: E402

KEYS = 60
PAYLOAD = "e" * 100


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _segment_store_pid(node: Standalone) -> int:
    found = subprocess.run(
        ["pgrep", "-f", f"segmentstore --data-dir {node.data_dir}"], capture_output=True, text=True
    ).stdout.split()
    return int(found[0])


def measured(pid: int, work: Callable[[], tuple[int, float]]) -> tuple[float, float]:
    """(events/s, segment store CPU seconds per second) of ``work`` -> (events, seconds)."""
    before = _cpu_seconds(pid)
    events, seconds = work()
    return events / seconds, (_cpu_seconds(pid) - before) / seconds


def official(node: Standalone) -> object:
    import pravega_client

    # (Pravega's client reads these lower-case names)
    os.environ["pravega_client_auth_method"] = "Basic"  # noqa: SIM112
    os.environ["pravega_client_auth_token"] = node.token  # noqa: SIM112
    return pravega_client.StreamManager(f"tcp://127.0.0.1:{node.grpc_port}", True, False)


def blocking(manager: object, scope: str, events: int) -> tuple[int, float]:
    manager.create_stream(scope, "blocking", 6)  # type: ignore[attr-defined]
    writer = manager.create_writer(scope, "blocking")  # type: ignore[attr-defined]
    started = time.perf_counter()
    for i in range(events):
        writer.write_event(PAYLOAD, routing_key=f"k{i % KEYS}")
    writer.flush()
    return events, time.perf_counter() - started


def pipelined(manager: object, scope: str, events: int) -> tuple[int, float]:
    manager.create_stream(scope, "async", 6)  # type: ignore[attr-defined]
    writer = manager.create_writer(scope, "async")  # type: ignore[attr-defined]

    async def run() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(
            writer.write_event_async(PAYLOAD, routing_key=f"k{i % KEYS}") for i in range(events)
        ))  # fmt: skip
        return time.perf_counter() - started

    return events, asyncio.run(run())


def read_back(manager: object, scope: str, events: int) -> tuple[int, float]:
    group = manager.create_reader_group("bench", scope, "async", False)  # type: ignore[attr-defined]
    reader = group.create_reader("r1")

    async def run() -> float:
        got, started = 0, time.perf_counter()
        while got < events:
            piece = await reader.get_segment_slice_async()
            got += sum(1 for _ in piece)
            reader.release_segment(piece)
        return time.perf_counter() - started

    seconds = asyncio.run(run())
    reader.reader_offline()
    return events, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--blocking-events", type=int, default=5_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pravega-bench-") as scratch:
        http, wire, metrics = free_ports(3)
        node = Standalone(Path(scratch) / "data", http, wire,
                          env={"MILLRACE_SEGMENTSTORE_METRICS_PORT": str(metrics)})  # fmt: skip
        try:
            node.wait_for(READY_LINE)
            pid = _segment_store_pid(node)
            rows = []
            with node.manager() as manager:
                before, started = _cpu_seconds(pid), time.perf_counter()
                written, _ = write_and_read(manager, args.events, KEYS)
                cpu = (_cpu_seconds(pid) - before) / (time.perf_counter() - started)
                rows.append(("millrace write_event + flush", written, cpu))
            client, scope = official(node), f"b{uuid.uuid4().hex[:8]}"
            client.create_scope(scope)  # type: ignore[attr-defined]
            few, many = args.blocking_events, args.events
            for name, work in (
                ("pravega write_event (blocking)", lambda: blocking(client, scope, few)),
                ("pravega write_event_async", lambda: pipelined(client, scope, many)),
                ("pravega reader group read", lambda: read_back(client, scope, many)),
            ):  # fmt: skip
                rate, cpu = measured(pid, work)
                rows.append((name, rate, cpu))
            for name, rate, cpu in rows:
                print(f"{name:34} {rate:>12,.0f} events/s   segment store CPU {cpu:.2f} s/s")
        finally:
            node.kill()


if __name__ == "__main__":
    main()
