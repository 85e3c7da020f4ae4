"""The client holds a small block while its writer has one in flight (Nagle's rule)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from millrace.client import segment_store as c
from millrace.client.segment_store import SegmentStoreClient
from segment_app.server import protocol as wire


def framed(*events: bytes) -> bytes:
    return b"".join(wire.encode_frame(wire.Event(e)) for e in events)


async def test_trickling_writers_send_fewer_blocks_than_events(server, store) -> None:
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    segments = [f"sc/st/{i}.#epoch.0" for i in range(20)]
    writers = [uuid.uuid4() for _ in segments]
    for segment, writer in zip(segments, writers, strict=True):
        await client.create_segment(segment)
        await client.setup_append(segment, writer)
    sent: list[int] = []
    send_block = client._send_block

    def spy(session, block, cmd) -> None:  # type: ignore[no-untyped-def]
        sent.append(len(block[3]))  # (request id, first, last, events)
        send_block(session, block, cmd)

    client._send_block = spy  # type: ignore[method-assign]
    futures = []
    for n in range(1, 51):  # round-robin, one event per writer per loop turn
        for writer in writers:
            futures.append(await client.append_block(writer, b"e%03d" % n))
        await asyncio.sleep(0)
    acks = await asyncio.wait_for(asyncio.gather(*futures), 30)
    assert [a.event_number for a in acks[:: len(writers)]] == list(range(1, 51))
    assert sum(sent) == 50 * len(writers)
    assert len(sent) < 50 * len(writers)  # some blocks carried several events
    for segment in segments:
        data = framed(*(b"e%03d" % n for n in range(1, 51)))
        assert (await client.read_segment(segment, 0, 1 << 20)).data == data
    await client.close()


async def test_a_failed_conditional_append_releases_a_held_block(server, store) -> None:
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    segment = "sc/st/c.#epoch.0"
    writer = uuid.uuid4()
    await client.create_segment(segment)
    await client.setup_append(segment, writer)
    conditional = asyncio.ensure_future(client.conditional_append(writer, b"x", 99))
    await asyncio.sleep(0)
    held = await client.append_block(writer, b"after")  # small, a block is in flight: held
    with pytest.raises(c.BadOffsetError):
        await conditional
    ack = await asyncio.wait_for(held, 5)
    assert ack.event_number == 2
    await client.close()
