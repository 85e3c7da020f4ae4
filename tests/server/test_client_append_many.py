"""``append_many``: one call hands events for many writers; order per writer, one future."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest

from millrace.client import segment_store as c
from millrace.client.segment_store import AppendLimits, SegmentStoreClient
from segment_app.server import protocol as wire


def framed(*events: bytes) -> bytes:
    return b"".join(wire.encode_frame(wire.Event(e)) for e in events)


async def _writers(client: SegmentStoreClient, count: int) -> tuple[list[str], list[uuid.UUID]]:
    segments = [f"sc/many/{i}.#epoch.0" for i in range(count)]
    writers = [uuid.uuid4() for _ in segments]
    for segment, writer in zip(segments, writers, strict=True):
        await client.create_segment(segment)
        await client.setup_append(segment, writer)
    return segments, writers


async def test_events_land_in_their_writers_segments_in_order(server, store) -> None:
    # Tiny blocks force the full-block path (a wait for room in flight) inside one call.
    limits = dataclasses.replace(AppendLimits(), block_events_max=3, blocks_in_flight_max=2)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    segments, writers = await _writers(client, 7)
    ids: list[uuid.UUID] = []
    events: list[bytes] = []
    for n in range(40):  # round-robin with a stride, so writers get uneven shares
        w = (n * 3) % len(writers)
        ids.append(writers[w])
        events.append(b"w%d-%02d" % (w, n))
    # Pairs as a producer hands them: a writer may come more than once in one call.
    pairs = [(i, [e]) for i, e in zip(ids, events, strict=True)]
    done = await client.append_many(pairs)
    assert await asyncio.wait_for(done, 30) is None
    for w, segment in enumerate(segments):
        mine = [e for i, e in zip(ids, events, strict=True) if i == writers[w]]
        assert (await client.read_segment(segment, 0, 1 << 20)).data == framed(*mine)
    # Numbering goes on where append_many left it: a later append_block continues each writer.
    ack = await (await client.append_block(writers[0], b"next"))
    assert ack.event_number == ids.count(writers[0]) + 1
    await client.close()


async def test_flush_waits_for_append_many(server, store) -> None:
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    segments, writers = await _writers(client, 3)
    done = await client.append_many(
        [(writers[0], [b"a", b"d"]), (writers[1], [b"b", b"e"]), (writers[2], [b"c", b"f"])]
    )
    await asyncio.wait_for(client.flush(), 30)
    assert done.done() and done.exception() is None
    assert (await client.read_segment(segments[2], 0, 1 << 20)).data == framed(b"c", b"f")
    await client.close()


async def test_bad_calls_queue_nothing(server, store) -> None:
    limits = dataclasses.replace(AppendLimits(), event_bytes_max=10)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    segments, writers = await _writers(client, 2)
    with pytest.raises(c.InvalidArgumentError, match="exceeds 10"):
        await client.append_many([(writers[0], [b"ok"]), (writers[1], [b"x" * 11])])
    with pytest.raises(c.InvalidArgumentError, match="no setup_append"):
        await client.append_many([(writers[0], [b"a"]), (uuid.uuid4(), [b"b"])])
    empty = await client.append_many([(writers[0], [])])
    assert empty.done()
    assert (await client.append_many([])).done()
    await client.flush()
    for segment in segments:
        assert (await client.get_info(segment)).write_offset == 0
    await client.close()


async def test_a_failed_writer_fails_the_call(server, store) -> None:
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    segments, writers = await _writers(client, 2)
    await client.seal(segments[1])  # appends to it are refused
    done = await client.append_many([(writers[0], [b"a"]), (writers[1], [b"b"])])
    with pytest.raises(c.SegmentSealedError):
        await asyncio.wait_for(done, 30)
    assert (await client.read_segment(segments[0], 0, 1 << 20)).data == framed(b"a")
    await client.close()


async def test_appends_wait_while_the_transport_is_full(server, store) -> None:
    """When the transport says its send buffer is full (pause_writing), append_block and
    append_many wait for resume_writing instead of queueing more bytes."""
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    segments, writers = await _writers(client, 2)
    assert client._transport is not None
    protocol = client._transport.get_protocol()
    protocol.pause_writing()  # as the transport does above its high-water mark
    one = asyncio.ensure_future(client.append_block(writers[0], b"a"))
    many = asyncio.ensure_future(client.append_many([(writers[1], [b"b"])]))
    await asyncio.sleep(0.2)
    assert not one.done() and not many.done()
    protocol.resume_writing()
    await asyncio.wait_for(await one, 10)
    await asyncio.wait_for(await many, 10)
    assert (await client.read_segment(segments[0], 0, 1 << 20)).data == framed(b"a")
    await client.close()
