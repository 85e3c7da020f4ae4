"""The client holds a small block while its writer has one in flight (Nagle's rule), and every
non-full block for a while when the connection is busy (many writers, a high event rate)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

import pytest

from millrace.client.transport import segment_store as c
from millrace.client.transport.segment_store import AppendLimits, SegmentStoreClient
from millrace.kernel import wire as wire


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
    send_block = client.appends._send_block

    def spy(session, block, cmd) -> None:  # type: ignore[no-untyped-def]
        sent.append(len(block[3]))  # (request id, first, last, events)
        send_block(session, block, cmd)

    client.appends._send_block = spy  # type: ignore[method-assign]
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


async def test_a_busy_connection_lets_blocks_linger(server, store) -> None:
    """Busy (here: 3 blocks open or in flight, 1,000 events/s), a connection keeps non-full
    blocks open for ``busy_linger_ms``, acks or not; idle again, it sends them at once."""
    limits = dataclasses.replace(
        AppendLimits(), busy_blocks=3, busy_events_per_s=1000, busy_linger_ms=400
    )
    client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    segments = [f"sc/busy/{i}.#epoch.0" for i in range(3)]
    writers = [uuid.uuid4() for _ in segments]
    for segment, writer in zip(segments, writers, strict=True):
        await client.create_segment(segment)
        await client.setup_append(segment, writer)
    started = time.monotonic()
    n = 0
    while not client.appends.timing.window.busy:  # ~3,000 events/s: busy after a window of 0.1 s
        assert time.monotonic() - started < 10, "never judged busy"
        await client.append_many([(w, b"%05d" % n) for w in writers])
        n += 1
        await asyncio.sleep(0.001)
    sent = client.appends.blocks_sent
    handed = time.monotonic()
    last = await client.append_many([(w, b"last") for w in writers])
    await asyncio.sleep(0.2)
    assert client.appends.blocks_sent == sent and not last.done()  # lingering (the acks came)
    await asyncio.wait_for(last, 5)
    assert time.monotonic() - handed >= 0.35
    await asyncio.sleep(0.2)  # no events for a while: idle again, judged when next scheduled
    quick = time.monotonic()
    await asyncio.wait_for(await client.append_many([(w, b"y") for w in writers]), 5)
    assert time.monotonic() - quick < 0.3
    assert not client.appends.timing.window.busy
    for segment in segments:
        data = (await client.read_segment(segment, 0, 1 << 20)).data
        assert data.endswith(framed(b"last", b"y"))
    await client.close()
