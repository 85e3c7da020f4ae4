"""The Python client end to end against a standalone node: the blocking API, producer
throughput, append-to-WebSocket latency, reader-group catch-up.

Usage::

    .venv/bin/python bench/sdk_client.py                   # everything (about 5 minutes)
    .venv/bin/python bench/sdk_client.py --only blocking   # or producer, latency, catchup
    .venv/bin/python bench/sdk_client.py --quick           # small sizes (a smoke run)

One ``millrace standalone`` node (embedded defaults: SQLite, file tier-1 with fdatasync before
every acknowledgement, filesystem tier-2) runs on a temporary directory; every producer and
reader is a process of its own:

* **blocking** (issue 13): the README's blocking calls: a ``write_event`` loop of 1,000,000
  events of 100 B over 64 routing keys and one ``flush``; a reader group's ``read_next`` loop
  and ``read_batch`` loop over them; the asyncio ``write_event`` beside them, and Redis
  pipelines; each run prints a CPU probe (a fixed Python loop). Targets: 500,000, 500,000 and
  1,500,000 events/s.
* **producer**: one process with ``AsyncStreamManager``'s event writer writes events of 100 B
  over 64 routing keys to a stream of 4 segments and flushes (durable); events/s =
  events / (first write to flush done); once with ``write_event`` per event, once with
  ``write_events`` lists of 1000 (as the Redis producer sends pipelines of 1000). The
  baseline, interleaved run by run, is a redis-py producer pipelining XADD (1000 per
  pipeline) into ``redis-server --appendfsync always`` (``bench/append_producer.py``).
  Target (issue 4): at least 250,000 events/s and 3x Redis.
* **latency**: the SDK producer paced at 100,000 events/s of 100 B (batches every 10 ms), each
  event stamped with its write time (as UTF-8 text); a plain ``websockets`` client follows the
  stream from the tail (``encoding=utf-8``) and takes, per event, receive time - write time.
  Target: p95 ≤ 10 ms, p99 ≤ 20 ms.
* **catchup**: 1 GB of 16 KiB events written and the stream sealed; then a reader group of
  ``--readers`` reader processes reads it all from the head; MB/s = bytes / (first read start to
  last reader done). Target: at least 200 MB/s.

Figures go to stdout (``--json`` for JSON); a latency histogram is printed.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from services import redis_server, standalone_node

HERE = Path(__file__).resolve()
PRODUCER_EVENTS = 1_000_000
LATENCY_RATE = 100_000
LATENCY_SECONDS = 10.0
LATENCY_WARMUP_SECONDS = 2.0
CATCHUP_BYTES = 1_000_000_000
CATCHUP_EVENT_BYTES = 16 * 1024


def _role(name: str, spec: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """Run this file as ``--role name`` in a process of its own; its JSON result."""
    done = subprocess.run(
        [sys.executable, str(HERE), "--role", name, json.dumps(spec)],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- roles (each in its own process) -------------------------------------------------------------


async def _manager(spec: dict[str, Any]) -> Any:
    from millrace.client.manager import AsyncStreamManager

    return AsyncStreamManager(spec["base"], spec["token"])


async def role_producer(spec: dict[str, Any]) -> dict[str, Any]:
    manager = await _manager(spec)
    await manager.create_scope(spec["scope"])
    await manager.create_stream(spec["scope"], spec["stream"], initial_segments=4)
    writer = manager.create_writer(spec["scope"], spec["stream"])
    payload = bytes(range(100))
    keys = [f"key-{i}" for i in range(64)]
    count = spec["events"]
    await writer.write_event(payload, keys[0])  # connect before the clock starts
    await writer.flush()
    started = time.perf_counter()
    if spec.get("batch"):  # write_events: lists of `batch` events, as Redis gets pipelines
        batch = [payload] * spec["batch"]
        for i in range(count // spec["batch"]):
            await writer.write_events(batch, keys[i & 63])
    else:
        for i in range(count):
            await writer.write_event(payload, keys[i & 63])
    await writer.flush()
    elapsed = time.perf_counter() - started
    await writer.close()
    await manager.close()
    return {"events": count, "seconds": elapsed, "events_per_s": count / elapsed}


async def role_paced(spec: dict[str, Any]) -> dict[str, Any]:
    """Write stamped 100 B events at ``rate``/s for ``seconds`` (batches every 10 ms)."""
    manager = await _manager(spec)
    writer = manager.create_writer(spec["scope"], spec["stream"])
    pad = b"." * 81  # 19 digits of the stamp + 81 = 100 bytes of UTF-8 text
    per_tick = spec["rate"] // 100
    loop = asyncio.get_running_loop()
    begin = loop.time()
    written = 0
    for tick in range(int(spec["seconds"] * 100)):
        delay = begin + tick / 100 - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        for _ in range(per_tick):
            await writer.write_event(b"%d" % time.time_ns() + pad, None)
        written += per_tick
    await writer.flush()
    await writer.close()
    await manager.close()
    return {"written": written, "seconds": loop.time() - begin}


async def role_ws(spec: dict[str, Any]) -> dict[str, Any]:
    """Follow the stream from the tail over a WebSocket; latencies of the events written after
    the warm-up, until ``expect`` events came or ``seconds`` passed."""
    import websockets

    uri = spec["base"].replace("http://", "ws://") + (
        f"/ws/streams/{spec['scope']}/{spec['stream']}?from=tail&encoding=utf-8"
        f"&token={spec['token']}"
    )
    # An array of doubles: a growing list of a million floats would make every full
    # collection of this process's garbage collector longer (a pause seen as latency).
    latencies = array.array("d")
    seen = 0
    ready = Path(spec["ready"])
    deadline = time.monotonic() + spec["seconds"]
    async with websockets.connect(uri, origin=spec["base"], max_size=None) as ws:
        ready.write_text("ready")
        while seen < spec["expect"] and time.monotonic() < deadline:
            try:
                raw = await asyncio.wait_for(ws.recv(), max(deadline - time.monotonic(), 0.01))
            except TimeoutError:
                break
            now = time.time_ns()
            message = json.loads(raw)
            for event in message.get("events", ()):
                stamp = int(event["text"][:19])
                seen += 1
                if stamp >= spec["from_ns"]:
                    latencies.append((now - stamp) / 1e6)
    return {"received": seen, "latencies_ms": sorted(latencies)}


async def role_fill(spec: dict[str, Any]) -> dict[str, Any]:
    manager = await _manager(spec)
    await manager.create_scope(spec["scope"])
    await manager.create_stream(spec["scope"], spec["stream"], initial_segments=4)
    writer = manager.create_writer(spec["scope"], spec["stream"], pending_events_max=4096)
    size = spec["event_bytes"]
    payload = bytes(range(256)) * (size // 256)
    count = spec["bytes"] // size
    started = time.perf_counter()
    for i in range(count):
        await writer.write_event(payload, f"k{i % 64}")
    await writer.flush()
    elapsed = time.perf_counter() - started
    await writer.close()
    await manager.seal_stream(spec["scope"], spec["stream"])
    await manager.create_reader_group(
        spec["scope"], "catchup", [f"{spec['scope']}/{spec['stream']}"]
    )
    await manager.close()
    return {"events": count, "bytes": count * size, "write_mb_per_s": count * size / elapsed / 1e6}


async def role_reader(spec: dict[str, Any]) -> dict[str, Any]:
    manager = await _manager(spec)
    group = manager.reader_group(spec["scope"], "catchup")
    reader = await group.create_reader(spec["reader"])
    Path(spec["ready"]).write_text("ready")
    while not Path(spec["go"]).exists():
        await asyncio.sleep(0.005)
    started = time.time()
    total = events = 0
    while (event := await reader.read_next(timeout=60)) is not None:
        total += len(event.data)
        events += 1
    ended = time.time()
    await reader.close()
    await manager.close()
    return {"bytes": total, "events": events, "started": started, "ended": ended}


def role_blocking_writer(spec: dict[str, Any]) -> dict[str, Any]:
    """The README's loop: blocking ``write_event`` of 100 B events with routing keys, one
    thread, one ``flush`` at the end. With ``hold``: nothing flushed until the end, and the
    peak memory of the process is reported (the writer's back-pressure bounds it)."""
    import resource

    from millrace.client.manager import StreamManager

    manager = StreamManager(spec["base"], token=spec["token"])
    manager.create_scope(spec["scope"])
    manager.create_stream(spec["scope"], spec["stream"], initial_segments=4)
    writer = manager.create_writer(spec["scope"], spec["stream"])
    payload = bytes(range(100))
    keys = [f"key-{i}" for i in range(64)]
    count = spec["events"]
    writer.write_event(payload, keys[0])  # connect before the clock starts
    writer.flush()
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    write = writer.write_event
    started = time.perf_counter()
    for i in range(count):
        write(payload, keys[i & 63])
    writer.flush()
    elapsed = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    writer.close()
    manager.close()
    return {
        "events": count + 1,
        "seconds": elapsed,
        "events_per_s": count / elapsed,
        "rss_before_mb": before_kb / 1024,
        "rss_peak_mb": peak_kb / 1024,
    }


def role_blocking_reader(spec: dict[str, Any]) -> dict[str, Any]:
    """Read the whole stream through a new reader group with the blocking reader:
    ``read_next`` per event, or ``read_batch``; the clock starts at the first event."""
    from millrace.client.manager import StreamManager

    manager = StreamManager(spec["base"], token=spec["token"])
    stream = f"{spec['scope']}/{spec['stream']}"
    group = manager.create_reader_group(spec["scope"], spec["group"], [stream])
    reader = group.create_reader("r")
    want = spec["events"]
    first = reader.read_next(timeout=60)
    assert first is not None
    got, size = 1, len(first.data)
    started = time.perf_counter()
    if spec["mode"] == "batch":
        while got < want:
            batch = reader.read_batch(8192, timeout=60)
            if not batch:
                break
            got += len(batch)
    else:
        read_next = reader.read_next
        while got < want:
            event = read_next(60)
            if event is None:
                break
            got += 1
    elapsed = time.perf_counter() - started
    reader.close()
    manager.close()
    return {"events": got, "event_bytes": size, "seconds": elapsed,
            "events_per_s": (got - 1) / elapsed}  # fmt: skip


ROLES: dict[str, Any] = {
    "producer": role_producer,
    "blocking_writer": role_blocking_writer,
    "blocking_reader": role_blocking_reader,
    "paced": role_paced,
    "ws": role_ws,
    "fill": role_fill,
    "reader": role_reader,
}


# -- measurements -------------------------------------------------------------------------------


def measure_producer(base: str, token: str, work: Path, repeat: int, events: int) -> dict[str, Any]:
    sdk, batched, redis = [], [], []
    with redis_server(work / "redis") as (host, port, _pid):
        for run in range(repeat):
            spec = {"base": base, "token": token, "scope": f"prod{run}", "stream": "s",
                    "events": events}  # fmt: skip
            sdk.append(_role("producer", spec)["events_per_s"])
            spec = {**spec, "scope": f"prodb{run}", "batch": 1000}
            batched.append(_role("producer", spec)["events_per_s"])
            redis.append(_redis_pipelined(host, port))
            print(f"  run {run + 1}: SDK write_event {sdk[-1]:,.0f} events/s, write_events"
                  f" {batched[-1]:,.0f}, Redis {redis[-1]:,.0f}", file=sys.stderr)  # fmt: skip
    mine, theirs = statistics.median(sdk), statistics.median(redis)
    lists = statistics.median(batched)
    return {
        "sdk_events_per_s": mine,
        "sdk_batched_events_per_s": lists,
        "redis_events_per_s": theirs,
        "ratio": mine / theirs,
        "batched_ratio": lists / theirs,
        "runs": {"sdk": sdk, "sdk_batched": batched, "redis": redis},
        "met": mine >= 250_000 and mine >= 3 * theirs,
        "batched_met": lists >= 250_000 and lists >= 3 * theirs,
    }


def _redis_pipelined(host: str, port: int) -> float:
    redis_spec = {"target": "redis", "host": host, "port": port, "event_bytes": 100,
                  "pipeline": 1000, "warmup": 1.0, "duration": 5.0}  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(HERE.parent / "append_producer.py"), json.dumps(redis_spec)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    result = [x for x in done.stdout.splitlines() if x.startswith("result ")][-1]
    return float(json.loads(result.split(" ", 1)[1])["events_per_s"])


def _cpu_probe() -> float:
    """Seconds a plain Python loop of 10 million additions takes here now: how fast this
    (shared, virtual) machine is at the moment, printed beside each run's figures."""
    started = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.perf_counter() - started


def measure_blocking(base: str, token: str, work: Path, repeat: int, events: int) -> dict[str, Any]:
    """Issue 13: the blocking calls as the README shows them, the asyncio ``write_event``, and
    redis-py pipelines into Redis (AOF always), interleaved run by run."""
    runs: dict[str, list[float]] = {"write": [], "read_next": [], "read_batch": [],
                                    "async_write": [], "redis": [], "rss_peak_mb": [],
                                    "cpu_probe_s": []}  # fmt: skip
    with redis_server(work / "redis") as (host, port, _pid):
        for run in range(repeat):
            spec = {"base": base, "token": token, "scope": f"blk{run}", "stream": "s",
                    "events": events}  # fmt: skip
            runs["cpu_probe_s"].append(_cpu_probe())
            wrote = _role("blocking_writer", spec)
            runs["write"].append(wrote["events_per_s"])
            runs["rss_peak_mb"].append(wrote["rss_peak_mb"])
            for mode in ("read_next", "read_batch"):
                how = mode.split("_")[1]
                reader_spec = {**spec, "events": wrote["events"], "group": f"g{run}{how}",
                               "mode": how}  # fmt: skip
                read = _role("blocking_reader", reader_spec)
                if read["events"] != wrote["events"]:
                    raise RuntimeError(f"{mode} read {read['events']} of {wrote['events']}")
                runs[mode].append(read["events_per_s"])
            runs["async_write"].append(
                _role("producer", {**spec, "scope": f"asy{run}"})["events_per_s"]
            )
            runs["redis"].append(_redis_pipelined(host, port))
            print(f"  run {run + 1}: write_event {runs['write'][-1]:,.0f}/s, read_next"
                  f" {runs['read_next'][-1]:,.0f}/s, read_batch {runs['read_batch'][-1]:,.0f}/s,"
                  f" async write_event {runs['async_write'][-1]:,.0f}/s,"
                  f" Redis {runs['redis'][-1]:,.0f}/s (CPU probe {runs['cpu_probe_s'][-1]:.2f} s)",
                  file=sys.stderr)  # fmt: skip
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "events": events,
        "medians": med,
        "runs": runs,
        "write_ratio": med["write"] / med["redis"],
        "met": {
            "write": med["write"] >= 500_000,
            "read_next": med["read_next"] >= 500_000,
            "read_batch": med["read_batch"] >= 1_500_000,
            "async_write": med["async_write"] >= 462_862,
        },
    }


def measure_latency(base: str, token: str, work: Path, rate: int, seconds: float) -> dict[str, Any]:
    from millrace.client.manager import StreamManager

    manager = StreamManager(base, token)
    manager.create_scope("lat")
    manager.create_stream("lat", "s", initial_segments=4)
    manager.close()
    ready = work / "ws.ready"
    from_ns = time.time_ns() + int((LATENCY_WARMUP_SECONDS + 1.5) * 1e9)
    spec = {"base": base, "token": token, "scope": "lat", "stream": "s", "ready": str(ready),
            "from_ns": from_ns, "expect": int(rate * (seconds + LATENCY_WARMUP_SECONDS)),
            "seconds": seconds + LATENCY_WARMUP_SECONDS + 30}  # fmt: skip
    ws = subprocess.Popen(
        [sys.executable, str(HERE), "--role", "ws", json.dumps(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    while not ready.exists():
        if ws.poll() is not None:
            raise RuntimeError(f"ws reader failed:\n{ws.stderr.read()[-3000:]}")  # type: ignore[union-attr]
        time.sleep(0.05)
    time.sleep(1.0)
    paced = _role("paced", {**spec, "rate": rate, "seconds": seconds + LATENCY_WARMUP_SECONDS})
    out, err = ws.communicate(timeout=120)
    if ws.returncode != 0:
        raise RuntimeError(f"ws reader failed:\n{err[-3000:]}")
    got = json.loads(out.strip().splitlines()[-1])
    lat = got["latencies_ms"]

    def q(x: float) -> float:
        return lat[min(int(x * len(lat)), len(lat) - 1)] if lat else float("nan")

    return {
        "rate": rate,
        "written": paced["written"],
        "received": got["received"],
        "measured_events": len(lat),
        "p50_ms": q(0.50),
        "p95_ms": q(0.95),
        "p99_ms": q(0.99),
        "max_ms": lat[-1] if lat else float("nan"),
        "histogram": _histogram(lat),
        "met": bool(lat) and q(0.95) <= 10 and q(0.99) <= 20,
    }


def _histogram(latencies: list[float]) -> list[tuple[str, int]]:
    edges = [1, 2, 5, 10, 20, 50, 100, float("inf")]
    rows, low = [], 0.0
    for edge in edges:
        count = sum(1 for x in latencies if low <= x < edge)
        label = f"{low:g}-{edge:g} ms" if edge != float("inf") else f"≥ {low:g} ms"
        rows.append((label, count))
        low = edge
    return rows


def measure_catchup(base: str, token: str, work: Path, total: int, readers: int) -> dict[str, Any]:
    spec = {"base": base, "token": token, "scope": "catch", "stream": "s", "bytes": total,
            "event_bytes": CATCHUP_EVENT_BYTES}  # fmt: skip
    filled = _role("fill", spec, timeout=1800)
    print(f"  wrote {filled['bytes'] / 1e6:,.0f} MB at {filled['write_mb_per_s']:.0f} MB/s",
          file=sys.stderr)  # fmt: skip
    go = work / "catchup.go"
    procs = []
    for i in range(readers):
        ready = work / f"reader{i}.ready"
        reader_spec = {**spec, "reader": f"r{i}", "ready": str(ready), "go": str(go)}
        procs.append((ready, subprocess.Popen(
            [sys.executable, str(HERE), "--role", "reader", json.dumps(reader_spec)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )))  # fmt: skip
    for ready, proc in procs:
        while not ready.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"reader failed:\n{proc.stderr.read()[-3000:]}")  # type: ignore[union-attr]
            time.sleep(0.05)
    go.write_text("go")
    results = []
    for _, proc in procs:
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"reader failed:\n{err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    read = sum(r["bytes"] for r in results)
    seconds = max(r["ended"] for r in results) - min(r["started"] for r in results)
    rate = read / seconds / 1e6
    return {
        "bytes": read,
        "expected_bytes": filled["bytes"],
        "readers": readers,
        "per_reader_bytes": [r["bytes"] for r in results],
        "seconds": seconds,
        "mb_per_s": rate,
        "met": read == filled["bytes"] and rate >= 200,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="blocking,producer,latency,catchup")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.role:
        outcome = ROLES[args.role](json.loads(rest[0]))
        result = asyncio.run(outcome) if asyncio.iscoroutine(outcome) else outcome
        print(json.dumps(result))
        return 0
    wanted = set(args.only.split(","))
    quick = args.quick
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.platform()}",
        "load_before": os.getloadavg()[0],
    }
    sizes = {
        "blocking": (1 if quick else args.repeat, 50_000 if quick else PRODUCER_EVENTS),
        "producer": (1 if quick else args.repeat, 50_000 if quick else PRODUCER_EVENTS),
        "latency": (10_000 if quick else LATENCY_RATE, 2.0 if quick else LATENCY_SECONDS),
        "catchup": (20_000_000 if quick else CATCHUP_BYTES, args.readers),
    }
    measures = {"blocking": measure_blocking, "producer": measure_producer,
                "latency": measure_latency, "catchup": measure_catchup}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="millrace-sdk-") as scratch:
        for name in ("blocking", "producer", "latency", "catchup"):
            if name not in wanted:
                continue
            print(f"{name}: on a node of its own", file=sys.stderr)
            work = Path(scratch) / name
            work.mkdir()
            with standalone_node(work) as (base, token, _wire):
                results[name] = measures[name](base, token, work, *sizes[name])  # type: ignore[operator]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print(results)
    return 0


def _print(results: dict[str, Any]) -> None:
    print(f"machine: {results['machine']} (load before: {results['load_before']:.2f})")
    if "blocking" in results:
        b = results["blocking"]
        m, met = b["medians"], b["met"]

        def verdict(name: str) -> str:
            return "MET" if met[name] else "NOT MET"

        print(f"blocking API, {b['events']:,} events of 100 B, 64 routing keys, medians:")
        print(f"  write_event loop + flush: {m['write']:,.0f} events/s = {b['write_ratio']:.1f}x"
              f" Redis ({m['redis']:,.0f})  target >= 500,000: {verdict('write')}")  # fmt: skip
        print(f"  reader group read_next:   {m['read_next']:,.0f} events/s"
              f"  target >= 500,000: {verdict('read_next')}")  # fmt: skip
        print(f"  reader group read_batch:  {m['read_batch']:,.0f} events/s"
              f"  target >= 1,500,000: {verdict('read_batch')}")  # fmt: skip
        print(f"  asyncio write_event:      {m['async_write']:,.0f} events/s"
              f"  target >= 462,862: {verdict('async_write')}")  # fmt: skip
        print(f"  writer process peak RSS:  {m['rss_peak_mb']:.0f} MB")
    if "producer" in results:
        p = results["producer"]
        print(f"producer, 100 B durable: Redis (AOF always, pipelines of 1000)"
              f" {p['redis_events_per_s']:,.0f} events/s")  # fmt: skip
        print(f"  SDK write_event (one call per event): {p['sdk_events_per_s']:,.0f} events/s,"
              f" {p['ratio']:.1f}x Redis  target >= 250,000 and >= 3x:"
              f" {'MET' if p['met'] else 'NOT MET'}")  # fmt: skip
        print(f"  SDK write_events (lists of 1000): {p['sdk_batched_events_per_s']:,.0f} events/s,"
              f" {p['batched_ratio']:.1f}x Redis  target >= 250,000 and >= 3x:"
              f" {'MET' if p['batched_met'] else 'NOT MET'}")  # fmt: skip
    if "latency" in results:
        lat = results["latency"]
        print(f"latency at {lat['rate']:,}/s (written {lat['written']:,},"
              f" received {lat['received']:,}): p50 {lat['p50_ms']:.2f} ms,"
              f" p95 {lat['p95_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.1f}"
              f"  target p95 <= 10, p99 <= 20: {'MET' if lat['met'] else 'NOT MET'}")  # fmt: skip
        peak = max((n for _, n in lat["histogram"]), default=0) or 1
        for label, count in lat["histogram"]:
            print(f"  {label:>12} | {'#' * round(50 * count / peak)} {count:,}")
    if "catchup" in results:
        c = results["catchup"]
        print(f"catch-up of {c['expected_bytes'] / 1e6:,.0f} MB by {c['readers']} readers:"
              f" {c['mb_per_s']:.0f} MB/s ({c['bytes']:,} bytes in {c['seconds']:.2f} s)"
              f"  target >= 200 MB/s: {'MET' if c['met'] else 'NOT MET'}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
