"""The segment store node's cost per append block, with a client that costs next to nothing.

Usage::

    .venv/bin/python bench/server_blocks.py   # 5,000 writers; blocks of 1, 8 and 100 events
    .venv/bin/python bench/server_blocks.py --writers 10 --events 8 100 --seconds 5

A node (file tier-1 with fdatasync before every ack, filesystem tier-2, auth off) runs in a
process of its own. One connection sets up ``--writers`` writers on as many segments; then, for
``--seconds``, the driver sends rounds of one AppendBlockEnd per writer, each block carrying
``--events`` events of 100 B, keeping at most ``WINDOW_BLOCKS`` (or two rounds, if more)
unacknowledged. The frames of a round
are encoded once per round with the protocol codec and replies are only counted (their
headers read, nothing decoded), so the node, not the driver, is what limits the figures:
acknowledged blocks/s, events/s, the node's CPU in the window, and CPU microseconds per block.

``append_throughput.py`` measures whole systems (the Python client batching a producer's
events); this measures the node alone, to tell the two costs apart.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import services  # a sibling module: bench/ is not a package

from millrace.kernel import wire as wire
from millrace.kernel.naming import qualified_segment_name

_HEADER = wire.FRAME_HEADER
EVENT = wire.EVENT_HEADER.pack(0, 100) + bytes(100)
#: Blocks unacknowledged at most (twice the node's ``appends_in_flight_max`` per connection).
WINDOW_BLOCKS = 2048


class _Replies:
    """Counts the reply frames of a connection, and the DataAppended among them."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.replies = 0
        self.acks = 0
        self.failures = 0

    async def run(self) -> None:
        buffer = bytearray()
        acked, failed = wire.DataAppended.TYPE, (wire.AppendSetup.TYPE, wire.DataAppended.TYPE)
        while data := await self.reader.read(1 << 20):
            buffer += data
            position = 0
            while len(buffer) - position >= _HEADER.size:
                kind, length = _HEADER.unpack_from(buffer, position)
                if len(buffer) - position - _HEADER.size < length:
                    break
                self.replies += 1
                self.acks += kind == acked
                self.failures += kind not in failed and kind != wire.Hello.TYPE
                position += _HEADER.size + length
            del buffer[:position]


async def measure(
    port: int, pid: int, writers: int, events: int, seconds: float
) -> dict[str, float]:
    from millrace.client.transport.segment_store import SegmentStoreClient

    tag = uuid.uuid4().hex[:8]
    names = [qualified_segment_name("blocks", tag, i) for i in range(writers)]
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    for start in range(0, writers, 500):
        await asyncio.gather(*(client.create_segment(n) for n in names[start : start + 500]))
    await client.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    replies = _Replies(reader)
    counting = asyncio.create_task(replies.run())
    writer.write(wire.encode_frame(wire.Hello(wire.WIRE_VERSION, wire.OLDEST_COMPATIBLE_VERSION)))
    ids = [uuid.uuid4() for _ in names]
    for i, (writer_id, name) in enumerate(zip(ids, names, strict=True)):
        writer.write(wire.encode_frame(wire.SetupAppend(i + 1, writer_id, name, "")))
    await writer.drain()
    while replies.replies < writers + 1:  # Hello and every AppendSetup
        await asyncio.sleep(0.01)
    data = EVENT * events
    request_id, sent, rounds = 1_000_000, 0, 0
    started_acks, cpu0 = replies.acks, _cpu_seconds(pid)
    window = max(2 * writers, WINDOW_BLOCKS)
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        rounds += 1
        frames = []
        for writer_id in ids:
            request_id += 1
            last = rounds * events
            block = wire.AppendBlockEnd(writer_id, len(data), data, events, last, request_id)
            frames.append(wire.encode_frame(block))
        writer.write(b"".join(frames))
        sent += writers
        await writer.drain()
        while sent - replies.acks > window:
            await asyncio.sleep(0.0005)
    elapsed = time.perf_counter() - began
    acked, cpu = replies.acks - started_acks, _cpu_seconds(pid) - cpu0
    counting.cancel()
    writer.close()
    if replies.failures:
        raise RuntimeError(f"the node refused {replies.failures} requests")
    return {
        "blocks_per_s": acked / elapsed,
        "events_per_s": acked * events / elapsed,
        "node_cores": cpu / elapsed,
        "cpu_us_per_block": cpu * 1e6 / max(acked, 1),
    }


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 10 ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", type=int, default=5000, help="writers (segments)")
    parser.add_argument("--events", type=int, nargs="+", default=[1, 8, 100], help="per block")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured per case")
    args = parser.parse_args(argv)
    if args.writers < 1 or args.seconds <= 0 or min(args.events) < 1:
        parser.error("--writers, --events and --seconds must be positive")
    print(f"node per-block cost: {args.writers:,} writers, 100 B events, {args.seconds:g} s each")
    columns = ("events/block", 12), ("blocks/s", 10), ("events/s", 11), ("node cores", 10)
    print(" ".join(f"{name:>{width}}" for name, width in columns), f"{'µs/block':>9}")
    for events in args.events:
        with (
            tempfile.TemporaryDirectory(prefix="millrace-blocks-") as tmp,
            services.millrace_node(Path(tmp)) as (_host, port, pid),
        ):
            got = asyncio.run(measure(port, pid, args.writers, events, args.seconds))
        print(
            f"{events:>12} {got['blocks_per_s']:>10,.0f} {got['events_per_s']:>11,.0f} "
            f"{got['node_cores']:>10.2f} {got['cpu_us_per_block']:>9.1f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
