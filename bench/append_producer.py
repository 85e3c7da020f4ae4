"""The producer process of ``append_throughput.py``: writes events for a while, reports figures.

Responsibility: one measurement, run in a process of its own (separate from the server it
drives), given as a JSON spec on the command line. It writes events as fast as it can (or at a
paced rate), counts the acknowledged ones inside the measurement window (after a warm-up), keeps
the ack latency of every call (weighted by its events), prints ``progress <acked events>`` about
twice a second and, at the end, ``result <json>`` with the raw figures.

Targets:

* ``millrace``: the async segment store client over the wire protocol. Events are handed to the
  client in steps (``append_block`` with a list of events; the client batches them into
  AppendBlockEnd blocks); with several segments the events go round-robin over the segments,
  one writer per segment (named by its ``writer_handle``), a step handed in one
  ``append_many`` call (or, with ``api: block``, one ``append_block`` call per writer per
  step). Ack latency = from handing an event to the client to its ack.
* ``redis``: redis-py pipelines of ``pipeline`` XADD commands (no MULTI) on one stream; ack
  latency = from building the pipeline to its last reply.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import json
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

PROGRESS_INTERVAL_S = 0.5
#: Distinct payloads cycled through (so not every event is the same bytes object).
PAYLOAD_POOL = 64
#: Longest wait for the last acks after the run before giving up on them.
DRAIN_TIMEOUT_S = 30.0


class Window:
    """Counts events and latencies inside the measurement window ``[start, end)``."""

    def __init__(self, start: float, end: float) -> None:
        self.start = start
        self.end = end
        self.acked = 0
        self.acked_in_window = 0
        self.latencies: list[tuple[float, int]] = []
        self.handed_in_window = 0
        self.opened = False
        self.closed = False

    def tick(self, now: float) -> None:
        """Say when the window opens and closes (the parent samples CPU use then)."""
        if self.start <= now and not self.opened:
            self.opened = True
            report("window", "open")
        if now >= self.end and not self.closed:
            self.closed = True
            report("window", "close")

    def ack(self, handed_at: float, events: int) -> None:
        now = time.perf_counter()
        self.acked += events
        if self.start <= now < self.end:
            self.acked_in_window += events
        if self.start <= handed_at < self.end:
            self.latencies.append((now - handed_at, events))
            self.handed_in_window += events

    def result(self, duration: float, event_bytes: int, **extra: Any) -> dict[str, Any]:
        rate = self.acked_in_window / duration
        return {
            "events": self.acked_in_window,
            "events_per_s": rate,
            "mb_per_s": rate * event_bytes / 1e6,
            "latency_p50_ms": percentile(self.latencies, 0.50) * 1e3,
            "latency_p99_ms": percentile(self.latencies, 0.99) * 1e3,
            "latency_max_ms": percentile(self.latencies, 1.0) * 1e3,
            **extra,
        }


def percentile(samples: list[tuple[float, int]], q: float) -> float:
    """The ``q`` quantile of latencies weighted by their event counts (0.0 when empty)."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    total = sum(n for _, n in ordered)
    rank = q * total
    seen = 0
    for latency, n in ordered:
        seen += n
        if seen >= rank:
            return latency
    return ordered[-1][0]


def payloads(size: int) -> list[bytes]:
    """``PAYLOAD_POOL`` distinct payloads of ``size`` bytes."""
    base = bytes(range(256)) * (size // 256 + 1)
    return [(i.to_bytes(2, "big") + base)[:size] for i in range(PAYLOAD_POOL)]


def report(kind: str, value: Any) -> None:
    print(kind, json.dumps(value) if not isinstance(value, int) else value, flush=True)


# --------------------------------------------------------------------------------------------
# Millrace


async def run_millrace(spec: dict[str, Any]) -> dict[str, Any]:
    from millrace.client.transport.segment_store import AppendLimits, SegmentStoreClient

    fields = {"linger_ms": spec.get("linger_ms", 0.0), **spec.get("client_limits", {})}
    limits = AppendLimits(**fields)
    if spec.get("block_events_max"):  # diagnostics: small blocks, many of them in flight
        limits = dataclasses.replace(
            limits, block_events_max=spec["block_events_max"], blocks_in_flight_max=4096
        )
    client = await SegmentStoreClient.connect(
        spec["host"], spec["port"], limits=limits, request_timeout=120.0
    )
    try:
        ids = await _open_segments(client, spec["segments"])
        # handles, not ids: a producer over thousands of writers saves a lookup per event
        writers = [client.writer_handle(writer_id) for writer_id in ids]
        return await _produce(client, writers, spec)
    finally:
        await client.close()


async def _open_segments(client: Any, count: int) -> list[uuid.UUID]:
    """Create ``count`` segments and set up one writer on each (many requests in flight)."""
    from millrace.kernel.naming import qualified_segment_name

    names = [qualified_segment_name("bench", "stream", i) for i in range(count)]
    writers = [uuid.uuid4() for _ in names]
    for start in range(0, count, 500):
        chunk = range(start, min(count, start + 500))
        await asyncio.gather(*(client.create_segment(names[i]) for i in chunk))
        await asyncio.gather(*(client.setup_append(names[i], writers[i]) for i in chunk))
    return writers


async def _produce(client: Any, writers: list[Any], spec: dict[str, Any]) -> dict[str, Any]:
    size, step = spec["event_bytes"], spec["step_events"]
    rate = spec.get("rate")  # events/s, or None: as fast as possible
    burst = spec.get("burst", 1)
    api = spec.get("api", "many")
    # the payloads cycled, laid out once so that a step's events are one slice (made in C:
    # the figures are the client's, not this loop's)
    pool = payloads(size) * (step // PAYLOAD_POOL + 2)
    begin = time.perf_counter()
    window = Window(begin + spec["warmup"], begin + spec["warmup"] + spec["duration"])
    next_progress = begin + PROGRESS_INTERVAL_S
    sent = 0
    cursor = 0
    while (now := time.perf_counter()) < window.end:
        window.tick(now)
        if now >= next_progress:
            report("progress", window.acked)
            next_progress = now + PROGRESS_INTERVAL_S
        n = step if rate is None else min(step, int(rate * (now - begin)) - sent)
        if n <= 0:
            await asyncio.sleep(spec.get("tick_s", 0.0005))
            continue
        cursor = await _hand(client, writers, pool, sent, n, cursor, burst, window.ack, api)
        sent += n
        # paced: what falls due meanwhile goes at the next tick, as an application hands its
        # events in batches (handing each as it falls due spun a core on 1-3 event calls)
        await asyncio.sleep(0 if rate is None else spec.get("tick_s", 0.0005))
    window.tick(time.perf_counter())
    await asyncio.wait_for(client.flush(), DRAIN_TIMEOUT_S)
    return window.result(
        spec["duration"],
        size,
        handed=sent,
        handed_in_window=window.handed_in_window,
        events_per_block=round(sent / max(1, client.appends.blocks_sent), 1),
    )


async def _hand(
    client: Any,
    writers: list[Any],
    pool: list[bytes],
    first: int,
    n: int,
    cursor: int,
    burst: int,
    on_ack: Callable[[float, int], None],
    api: str = "many",
) -> int:
    """Hand events ``first .. first+n-1`` to the client, round-robin over the writers from
    ``cursor``, ``burst`` consecutive events to a writer; returns the next cursor. ``api``:
    ``many`` hands a whole step in one ``append_many`` call (a writer's share of it as one
    pair); ``pairs`` does too, with one ``(writer, event)`` pair per event; ``block`` makes one
    ``append_block`` call per writer per step (one per event when the writers outnumber it)."""
    k = len(writers)
    handed_at = time.perf_counter()
    events = pool[first % PAYLOAD_POOL : first % PAYLOAD_POOL + n]  # (n <= the step)
    if k == 1:
        future = await client.append_block(writers[0], events)
        future.add_done_callback(functools.partial(_acked, on_ack, handed_at, n))
        return 0
    if api in ("many", "pairs") and burst == 1:  # one call for the step, whatever the writers
        if n <= k:  # one event per writer: (writer, event) pairs, zipped
            ring = writers[cursor : cursor + n]
            if len(ring) < n:  # (the round wraps)
                ring += writers[: n - len(ring)]
            shares: Any = zip(ring, events, strict=True)  # (no tuple per pair)
        elif api == "pairs":  # still one pair per event: the writers come round again
            ring = itertools.islice(itertools.cycle(writers[cursor:] + writers[:cursor]), n)
            shares = zip(ring, events, strict=True)
        else:
            shares = [(writers[(cursor + j) % k], events[j::k]) for j in range(k)]
        done = await client.append_many(shares)
        done.add_done_callback(functools.partial(_acked, on_ack, handed_at, n))
        return (cursor + n) % k
    chunks = [events[i : i + burst] for i in range(0, n, burst)] if burst > 1 else []
    visits = len(chunks) if burst > 1 else n
    for j in range(min(k, visits)):
        share = events[j::k] if burst == 1 else [e for c in chunks[j::k] for e in c]
        future = await client.append_block(writers[(cursor + j) % k], share)
        future.add_done_callback(functools.partial(_acked, on_ack, handed_at, len(share)))
    return (cursor + visits) % k


def _acked(on_ack: Callable[[float, int], None], handed_at: float, n: int, future: Any) -> None:
    if not future.cancelled() and future.exception() is None:
        on_ack(handed_at, n)


# --------------------------------------------------------------------------------------------
# Redis Streams


def run_redis(spec: dict[str, Any]) -> dict[str, Any]:
    import redis

    r = redis.Redis(host=spec["host"], port=spec["port"])
    size, batch = spec["event_bytes"], spec["pipeline"]
    pool = payloads(size)
    begin = time.perf_counter()
    window = Window(begin + spec["warmup"], begin + spec["warmup"] + spec["duration"])
    next_progress = begin + PROGRESS_INTERVAL_S
    sent = 0
    while (now := time.perf_counter()) < window.end:
        window.tick(now)
        if now >= next_progress:
            report("progress", window.acked)
            next_progress = now + PROGRESS_INTERVAL_S
        pipe = r.pipeline(transaction=False)
        for i in range(batch):
            pipe.xadd("bench", {"d": pool[(sent + i) % PAYLOAD_POOL]})
        pipe.execute()
        sent += batch
        window.ack(now, batch)
    window.tick(time.perf_counter())
    r.close()
    return window.result(
        spec["duration"], size, handed=sent, handed_in_window=window.handed_in_window
    )


def _run_millrace_sync(spec: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(run_millrace(spec))


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    run = run_redis if spec["target"] == "redis" else _run_millrace_sync
    result = run(spec)
    report("result", result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
