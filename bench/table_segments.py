"""Table segment updates and reads per second with 1 KiB values, next to Redis hashes with
``appendfsync always``, in one run.

Millrace: ``millrace standalone`` on embedded defaults (file tier-1 with fsync); ``--clients``
connections to its segment store each send, one request at a time as Pravega's clients do,
``UpdateTableEntries`` of one key (1 KiB value, unconditional) to one table segment, then
``ReadTable`` of one key. Every update is durable when acknowledged. Redis: ``redis-server``
with AOF and ``appendfsync always`` (every write fsynced before its reply), no snapshots;
the same number of connections (``redis.asyncio``) send ``HSET`` then ``HGET`` on one hash.
Same key space (``--keys``), same values, same client process.

    .venv/bin/python bench/table_segments.py [--seconds 10] [--clients 16] [--keys 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.services import redis_server  # noqa: E402
from millrace.kernel import wire  # noqa: E402
from tests.acceptance.standalone_node import READY_LINE, Standalone, free_ports  # noqa: E402

TABLE = "bench/kv_kvtable/0.#epoch.0"
VALUE = bytes(random.Random(1).randrange(256) for _ in range(1024))


class TableClient:
    """One connection to the segment store, one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: str):
        self.reader, self.writer, self.token, self.next_id = reader, writer, token, 0

    @classmethod
    async def open(cls, port: int, token: str) -> TableClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer, token)
        writer.write(wire.encode_frame(wire.Hello(15, 5)))
        await client._recv()
        return client

    async def _recv(self) -> object:
        kind, length = struct.unpack(">ii", await self.reader.readexactly(8))
        return wire.decode_frame(kind, await self.reader.readexactly(length))

    async def ask(self, make: Callable[..., object], *args: object) -> object:
        self.next_id += 1
        self.writer.write(wire.encode_frame(make(self.next_id, *args)))
        return await self._recv()

    async def update(self, key: bytes) -> None:
        entry = (wire.TableKey(key, wire.KEY_NO_VERSION), wire.TableValue(VALUE))
        reply = await self.ask(wire.UpdateTableEntries, TABLE, self.token, (entry,), -1)
        assert isinstance(reply, wire.TableEntriesUpdated), reply

    async def read(self, key: bytes) -> None:
        reply = await self.ask(wire.ReadTable, TABLE, self.token, (wire.TableKey(key),))
        assert isinstance(reply, wire.TableRead), reply


async def rate(clients: int, seconds: float, op: Callable[[int, int], Awaitable[None]]) -> float:
    """Operations per second of ``clients`` loops calling ``op(client, i)`` for ``seconds``."""
    done = [0] * clients
    deadline = time.perf_counter() + seconds

    async def loop(n: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            await op(n, i)
            i += 1
        done[n] = i

    started = time.perf_counter()
    await asyncio.gather(*(loop(n) for n in range(clients)))
    return sum(done) / (time.perf_counter() - started)


async def millrace(port: int, token: str, args: argparse.Namespace) -> tuple[float, float]:
    clients = [await TableClient.open(port, token) for _ in range(args.clients)]
    created = await clients[0].ask(wire.CreateTableSegment, TABLE, token)
    assert isinstance(created, wire.SegmentCreated | wire.SegmentAlreadyExists), created

    def key(n: int, i: int) -> bytes:
        return f"key-{(n * 7919 + i) % args.keys}".encode()

    updates = await rate(args.clients, args.seconds, lambda n, i: clients[n].update(key(n, i)))
    reads = await rate(args.clients, args.seconds, lambda n, i: clients[n].read(key(n, i)))
    for client in clients:
        client.writer.close()
    return updates, reads


async def redis_hashes(port: int, args: argparse.Namespace) -> tuple[float, float]:
    import redis.asyncio as aioredis

    clients = [aioredis.Redis(host="127.0.0.1", port=port) for _ in range(args.clients)]

    def key(n: int, i: int) -> str:
        return f"key-{(n * 7919 + i) % args.keys}"

    async def hset(n: int, i: int) -> None:
        await clients[n].hset("kv", key(n, i), VALUE)

    async def hget(n: int, i: int) -> None:
        await clients[n].hget("kv", key(n, i))

    updates = await rate(args.clients, args.seconds, hset)
    reads = await rate(args.clients, args.seconds, hget)
    for client in clients:
        await client.aclose()
    return updates, reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--keys", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="table-bench-") as scratch:
        where = Path(scratch)
        http, wire_port, metrics = free_ports(3)
        node = Standalone(where / "data", http, wire_port,
                          env={"MILLRACE_SEGMENTSTORE_METRICS_PORT": str(metrics)})  # fmt: skip
        try:
            node.wait_for(READY_LINE)
            token = subprocess.run(
                [sys.executable, "-m", "millrace.ops.cli", "mint-token", "--data-dir",
                 str(node.data_dir), "--access", "READ_UPDATE", "bench/"],
                env=node.environ, capture_output=True, text=True, check=True,
            ).stdout.strip().splitlines()[-1]  # fmt: skip
            ours = asyncio.run(millrace(node.wire_port, token, args))
        finally:
            node.kill()
        with redis_server(where) as (_, port, _pid):
            theirs = asyncio.run(redis_hashes(port, args))
    print(f"{args.clients} clients, 1 KiB values, {args.keys} keys, {args.seconds:.0f} s each")
    for what, i in (("updates", 0), ("reads", 1)):
        print(f"{what:8} Millrace table segment {ours[i]:>10,.0f}/s   Redis hash (appendfsync "
              f"always) {theirs[i]:>10,.0f}/s   ({ours[i] / theirs[i]:.2f}x)")  # fmt: skip
    met = ours[0] >= theirs[0] and ours[1] >= theirs[1]
    print(f"target: at least 1x Redis for both: {'MET' if met else 'NOT MET'}")


if __name__ == "__main__":
    main()
