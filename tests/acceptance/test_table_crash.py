"""Table segments survive ``kill -9``: writers update a table over the wire (conditional
counters and puts of new keys) while the segment store process is SIGKILLed, three times; after
each restart every acknowledged update is there, and the index rebuilt from the segment takes
conditional updates at the versions it reads."""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from pathlib import Path
from typing import Any

from millrace.kernel import wire
from tests.acceptance.nodes import NodeFactory

TABLE = "crash/rg_kvtable/0.#epoch.0"
COUNTERS = 4
KILLS = 3


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.next_id = reader, writer, 0

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = cls(reader, writer)
        writer.write(wire.encode_frame(wire.Hello(15, 5)))
        await conn._recv()
        return conn

    async def _recv(self) -> Any:
        header = await asyncio.wait_for(self.reader.readexactly(8), 30)
        kind, length = struct.unpack(">ii", header)
        return wire.decode_frame(kind, await asyncio.wait_for(self.reader.readexactly(length), 30))

    async def ask(self, make: Any, *args: Any) -> Any:
        self.next_id += 1
        self.writer.write(wire.encode_frame(make(self.next_id, *args)))
        return await self._recv()

    async def read(self, *keys: bytes) -> dict[bytes, tuple[bytes, int]]:
        reply = await self.ask(wire.ReadTable, TABLE, "", tuple(wire.TableKey(k) for k in keys))
        assert isinstance(reply, wire.TableRead), reply
        return {k.data: (v.data, k.version) for k, v in reply.entries}

    async def put(self, key: bytes, value: bytes, version: int) -> Any:
        entry = (wire.TableKey(key, version), wire.TableValue(value))
        return await self.ask(wire.UpdateTableEntries, TABLE, "", (entry,), -1)

    def close(self) -> None:
        self.writer.close()


async def _writer(port: int, number: int, acked: dict[bytes, int], stop: asyncio.Event) -> None:
    """Increments the counters (read, then update at the version read) and puts new keys;
    ``acked`` keeps the highest acknowledged value of each key."""
    rng = random.Random(number)
    try:
        conn = await Connection.open(port)
    except OSError:
        return
    try:
        i = 0
        while not stop.is_set():
            i += 1
            if rng.random() < 0.5:
                key = f"counter-{rng.randrange(COUNTERS)}".encode()
                value, version = (await conn.read(key))[key]
                count = int(value or b"0") + 1
                reply = await conn.put(key, str(count).encode(), version)
            else:
                key, count = f"w{number}-{i}".encode(), i
                reply = await conn.put(key, str(count).encode(), wire.KEY_NOT_EXISTS)
            if isinstance(reply, wire.TableEntriesUpdated):
                acked[key] = max(acked.get(key, 0), count)
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        return  # the node was killed
    finally:
        conn.close()


async def test_acknowledged_table_updates_survive_kill_9(
    nodes: NodeFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    acked: dict[bytes, int] = {}
    node = await nodes.spawn(data_dir)
    port = await node.wait_ready()
    first = await Connection.open(port)
    assert isinstance(await first.ask(wire.CreateTableSegment, TABLE, ""), wire.SegmentCreated)
    first.close()
    for kill in range(KILLS):
        stop = asyncio.Event()
        writers = [asyncio.create_task(_writer(port, kill * 10 + n, acked, stop)) for n in range(4)]
        await asyncio.sleep(1.0 + kill * 0.3)
        await node.kill()
        stop.set()
        await asyncio.gather(*writers)
        node = await nodes.spawn(data_dir)
        port = await node.wait_ready()
        conn = await Connection.open(port)
        try:
            found = await conn.read(*acked)
            lost = {k: v for k, v in acked.items() if int(found[k][0] or b"0") < v}
            assert not lost, f"after kill {kill + 1}: acknowledged updates lost: {lost}"
            key = b"counter-0"
            value, version = (await conn.read(key))[key]
            reply = await conn.put(key, str(int(value or b"0") + 1).encode(), version)
            assert isinstance(reply, wire.TableEntriesUpdated), reply
            acked[key] = int(value or b"0") + 1
            stale = await conn.put(key, b"stale", version)
            assert isinstance(stale, wire.TableKeyBadVersion), stale
        finally:
            conn.close()
    assert len(acked) > 50, "the writers got little done before the kills"
    with contextlib.suppress(Exception):
        await node.terminate()
