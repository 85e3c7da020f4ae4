"""Events with routing keys through a writer; two readers of one reader group share them.

The writer goes on for ``seconds`` while both read: the first reader took every segment when it
came (it was alone), and gives the second its share at its next rebalance (Pravega's readers
look every 10 s)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

from common import answer, manager

m = manager()
scope, count, seconds = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
m.create_scope(scope)
m.create_stream(scope, "orders", 4)
writer = m.create_writer(scope, "orders")
group = m.create_reader_group("shared", scope, "orders", False)
readers = {name: group.create_reader(name) for name in ("r1", "r2")}
seen: dict[str, list[str]] = {name: [] for name in readers}
lock = threading.Lock()


def total() -> int:
    with lock:
        return sum(map(len, seen.values()))


def work(name: str, reader: Any) -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds + 60
        while loop.time() < deadline and total() < count:
            piece = await reader.get_segment_slice_async()
            events = [event.data().decode() for event in piece]
            reader.release_segment(piece)
            with lock:
                seen[name] += events

    asyncio.run(run())


threads = [threading.Thread(target=work, args=item) for item in readers.items()]
for thread in threads:
    thread.start()
for i in range(count):
    writer.write_event(f"k{i % 8}:{i}", routing_key=f"k{i % 8}")
    time.sleep(seconds / count)
writer.flush()
for thread in threads:
    thread.join(90)
for reader in readers.values():
    reader.reader_offline()
m.delete_reader_group("shared", scope)
answer({"by_reader": seen})
