"""The client's cost per event in ``append_many``, with no network and no node.

Usage::

    .venv/bin/python bench/client_append_many.py                 # 5,000 writers, handles, zips
    .venv/bin/python bench/client_append_many.py --writers 10 --ids --lists --rounds 5

A ``SegmentStoreClient`` with no connection gets ``--writers`` writer sessions, then for each
round hands ``--steps`` calls of ``--step`` events of 100 B round-robin over the writers (as
``append_throughput.py``'s producer does), by ``writer_handle`` or, with ``--ids``, by writer
id, as zips or, with ``--lists``, as lists of pairs. Every ``--sweep`` calls the open blocks
are sent (the commands encoded and dropped) and acknowledged at once, as a busy connection's
sweep and the node's replies would. It prints microseconds per event for each round: the
client's own work (adding events to open blocks, making and encoding blocks, taking acks),
which at thousands of writers is mostly misses of the CPU's caches. A diagnostic: it drives
the client's private state to stand in for the network, so it tells one client build from
another (run them interleaved), not what a deployment gets.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid

from append_producer import PAYLOAD_POOL, payloads  # a sibling module: bench/ is not a package

from millrace.client.transport import segment_store as ss
from millrace.client.transport.append_blocks import Session

EVENT_BYTES = 100


async def run(args: argparse.Namespace) -> list[float]:
    client = ss.SegmentStoreClient()
    client.connection.transport = object()  # type: ignore[assignment]  # (never written to: see below)
    dropped: list[object] = []
    client.connection.send = lambda cmd: dropped.extend(ss.wire.encode_parts(cmd))  # type: ignore[method-assign]
    ids = [uuid.uuid4() for _ in range(args.writers)]
    for writer_id in ids:
        client.appends.sessions[writer_id.int] = Session(
            owner=client.appends, segment=f"bench/{writer_id}", writer_id=writer_id, open_first=1
        )
    writers = ids if args.ids else [client.writer_handle(w) for w in ids]
    laps = writers * (args.step // len(writers) + 2)  # (a step's ring is one slice of it)
    pool = payloads(EVENT_BYTES) * (args.step // PAYLOAD_POOL + 2)  # (a step is one slice)
    figures = []
    for _ in range(args.rounds):
        cursor = handed = 0
        started = time.perf_counter()
        for call in range(args.steps):
            events = pool[handed % PAYLOAD_POOL : handed % PAYLOAD_POOL + args.step]
            ring = laps[cursor : cursor + args.step]
            pairs = zip(ring, events, strict=True)
            await client.append_many(list(pairs) if args.lists else pairs)
            cursor = (cursor + args.step) % len(writers)
            handed += args.step
            if (call + 1) % args.sweep == 0:
                _send_and_ack(client)
                dropped.clear()
                await asyncio.sleep(0)
        figures.append((time.perf_counter() - started) / handed * 1e6)
    return figures


def _send_and_ack(client: ss.SegmentStoreClient) -> None:
    """Send every open block (as the busy sweep does) and acknowledge all blocks at once."""
    for session in client.appends.sessions.values():
        if session.open_events:
            session.busy_until = 0.0
            session.send_due = True
            client.appends._pump(session, hold_small=False)
    client.appends.timing._lingering.clear()
    for key, session in client.appends.sessions.items():
        if session.in_flight:
            client.appends.data_appended(key, session.in_flight[-1][2], -1, 0)
    client.appends.completion.advance()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--writers", type=int, default=5000)
    p.add_argument("--step", type=int, default=1000, help="events per append_many call")
    p.add_argument("--steps", type=int, default=3000, help="calls per round")
    p.add_argument("--sweep", type=int, default=500, help="calls between sends and acks")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ids", action="store_true", help="writer ids instead of handles")
    p.add_argument("--lists", action="store_true", help="lists of pairs instead of zips")
    args = p.parse_args(argv)
    if min(args.writers, args.step, args.steps, args.sweep, args.rounds) < 1:
        p.error("every count must be at least 1")
    figures = asyncio.run(run(args))
    how = f"{'ids' if args.ids else 'handles'}, {'lists' if args.lists else 'zips'}"
    print(
        f"append_many alone: {args.writers:,} writers, {args.step:,} events per call ({how}): "
        + " ".join(f"{f:.3f}" for f in figures)
        + " µs/event"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
