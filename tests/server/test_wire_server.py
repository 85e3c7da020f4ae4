"""The wire server end to end over real TCP: a real segment store (memory tiers) behind it."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid

import pytest

from millrace.client.transport import segment_store as c
from millrace.client.transport.segment_store import SegmentStoreClient
from millrace.kernel import wire as wire
from segment_app.engine.store import SegmentStore

RawConnection = object  # the ``raw`` fixture's type (tests/in_process_node.py)

SEG = "sc/st/0.#epoch.0"


def framed(*events: bytes) -> bytes:
    return b"".join(wire.encode_frame(wire.Event(e)) for e in events)


async def set_up_writer(raw: RawConnection, store: SegmentStore) -> uuid.UUID:
    """Create SEG and set up a new writer on it over ``raw``; returns the writer id."""
    await store.create_segment(SEG)
    writer = uuid.uuid4()
    await raw.send(wire.SetupAppend(1, writer, SEG, ""))
    await raw.recv()
    return writer


async def test_hello_answers_17_5(raw: RawConnection) -> None:
    await raw.send(wire.Hello(17, 5))
    assert await raw.recv() == wire.Hello(17, 5)


@pytest.mark.parametrize("high, low", [(30, 20), (4, 1)])
async def test_hello_outside_our_range_closes(server, open_raw, high: int, low: int) -> None:
    conn = await open_raw(server.port, hello=False)
    await conn.send(wire.Hello(high, low))
    assert await conn.recv() == wire.Hello(17, 5)
    assert await conn.closed_by_server()


async def test_append_and_read_back(client: SegmentStoreClient) -> None:
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    assert await client.setup_append(SEG, writer) == c.NO_EVENT_NUMBER
    ack = await (await client.append_block(writer, [b"hello-1", b"hello-2"]))
    assert ack.event_number == 2
    assert ack.segment_write_offset == 30
    result = await client.read_segment(SEG, 0, 1000)
    assert result.data == framed(b"hello-1", b"hello-2")
    assert (result.offset, result.at_tail, result.end_of_segment) == (0, True, False)
    info = await client.get_info(SEG)
    assert (info.write_offset, info.start_offset, info.sealed, info.exists) == (30, 0, False, True)


async def test_many_blocks_pipelined_in_order(server, store) -> None:
    limits = c.AppendLimits(block_bytes_max=256, blocks_in_flight_max=8)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    events = [f"event-{i:05d}".encode() for i in range(2000)]
    futures = [await client.append_block(writer, e) for e in events]
    acks = await asyncio.gather(*futures)
    assert [a.event_number for a in acks] == list(range(1, 2001))
    expected = framed(*events)
    assert acks[-1].segment_write_offset == len(expected)
    data = b""
    while len(data) < len(expected):
        data += (await client.read_segment(SEG, len(data), 1 << 20)).data
    assert data == expected
    assert await store.last_event_number(SEG, writer) == 2000
    await client.close()


async def test_pipelining_keeps_reading_while_appends_are_pending(server, store, open_raw) -> None:
    """Several blocks are sent before any ack is read; every ack arrives, in order."""
    conn = await open_raw(server.port)
    await store.create_segment(SEG)
    writer = uuid.uuid4()
    await conn.send(wire.SetupAppend(1, writer, SEG, ""))
    assert isinstance(await conn.recv(), wire.AppendSetup)
    data = [framed(b"event-%03d" % n) for n in range(1, 51)]
    blocks = b"".join(
        wire.encode_frame(wire.AppendBlockEnd(writer, len(d), d, 1, n, 100 + n))
        for n, d in enumerate(data, 1)
    )
    await conn.send_bytes(blocks)
    replies = [await conn.recv() for _ in range(50)]
    assert [r.event_number for r in replies] == list(range(1, 51))
    assert [r.request_id for r in replies] == list(range(101, 151))
    assert [r.current_segment_write_offset for r in replies] == [17 * n for n in range(1, 51)]
    await conn.close()


async def test_duplicate_block_is_acknowledged_and_dropped(raw: RawConnection, store) -> None:
    writer = await set_up_writer(raw, store)
    data = framed(b"once")
    await raw.send(wire.AppendBlockEnd(writer, len(data), data, 1, 1, 2))
    first = await raw.recv()
    await raw.send(wire.AppendBlockEnd(writer, len(data), data, 1, 1, 3))
    second = await raw.recv()
    assert isinstance(second, wire.DataAppended)
    assert (second.event_number, second.request_id) == (1, 3)
    assert (await store.get_info(SEG)).length == first.current_segment_write_offset == len(data)


async def test_reconnecting_writer_learns_its_last_event_number(server, client) -> None:
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    await (await client.append_block(writer, [b"a", b"b", b"c"]))
    other = await SegmentStoreClient.connect("127.0.0.1", server.port)
    assert await other.setup_append(SEG, writer) == 3
    ack = await (await other.append_block(writer, b"d"))
    assert ack.event_number == 4
    await other.close()


async def test_conditional_append(client: SegmentStoreClient) -> None:
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    ack = await client.conditional_append(writer, b"abc", 0)
    assert ack.segment_write_offset == 3
    with pytest.raises(c.BadOffsetError):
        await client.conditional_append(writer, b"def", 0)
    ack = await client.conditional_append(writer, b"def", 3)
    assert ack.segment_write_offset == 6
    assert (await client.read_segment(SEG, 0)).data == b"abcdef"


async def test_conditional_append_with_event_wrapper(raw: RawConnection, store) -> None:
    writer = await set_up_writer(raw, store)
    await raw.send(wire.ConditionalAppend(writer, 1, 0, b"xyz", 2))
    assert (await raw.recv()).current_segment_write_offset == 11
    await raw.send(wire.ConditionalAppend(writer, 2, 5, b"xyz", 3))
    assert await raw.recv() == wire.ConditionalCheckFailed(writer, 2, 3)
    assert (await store.read(SEG, 0, 100)).data == framed(b"xyz")


async def test_tail_read_waits_for_data(make_server, store) -> None:
    server = await make_server(read_tail_wait_seconds=5.0)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    await client.create_segment(SEG)
    started = time.monotonic()
    read = asyncio.ensure_future(client.read_segment(SEG, 0, 100))
    await asyncio.sleep(0.2)
    assert not read.done()
    await store.append(SEG, b"late data")
    result = await asyncio.wait_for(read, 3)
    assert result.data == b"late data"
    assert time.monotonic() - started < 3
    await client.close()


async def test_tail_read_answers_empty_after_the_wait(client: SegmentStoreClient) -> None:
    await client.create_segment(SEG)
    started = time.monotonic()
    result = await client.read_segment(SEG, 0, 100)
    assert (result.data, result.at_tail, result.end_of_segment) == (b"", True, False)
    assert 0.25 <= time.monotonic() - started < 3


async def test_read_size_is_capped(client: SegmentStoreClient, store) -> None:
    await client.create_segment(SEG)
    for _ in range(3):
        await store.append(SEG, bytes(1024 * 1024))
    result = await client.read_segment(SEG, 0, 8 * 1024 * 1024)
    assert 0 < len(result.data) <= 2 * 1024 * 1024
    small = await client.read_segment(SEG, 10, 1)
    assert len(small.data) == 8  # Java reads at least an event header's worth
    assert small.offset == 10


async def test_seal_rejects_appends(client: SegmentStoreClient) -> None:
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    await (await client.append_block(writer, b"before"))
    await client.seal(SEG)
    with pytest.raises(c.SegmentSealedError) as info:
        await (await client.append_block(writer, b"after"))
    assert info.value.segment == SEG
    end = await client.read_segment(SEG, 0)
    assert end.end_of_segment and end.data == framed(b"before")
    assert (await client.get_info(SEG)).sealed


async def test_sealed_writer_refuses_later_blocks_without_appending(raw, store) -> None:
    writer = await set_up_writer(raw, store)
    await store.seal(SEG)
    data = framed(b"x")
    await raw.send(wire.AppendBlockEnd(writer, len(data), data, 1, 1, 2))
    await raw.send(wire.AppendBlockEnd(writer, len(data), data, 1, 2, 3))
    replies = [await raw.recv(), await raw.recv()]
    assert [type(r) for r in replies] == [wire.SegmentIsSealed, wire.SegmentIsSealed]
    assert [r.request_id for r in replies] == [2, 3]


async def test_truncate_then_read_below_start(client: SegmentStoreClient, store) -> None:
    await client.create_segment(SEG)
    await store.append(SEG, b"0123456789")
    await client.truncate(SEG, 4)
    info = await client.get_info(SEG)
    assert info.start_offset == 4
    with pytest.raises(c.SegmentTruncatedError) as error:
        await client.read_segment(SEG, 2, 10)
    assert error.value.start_offset == 4
    assert (await client.read_segment(SEG, 4, 10)).data == b"456789"


async def test_merge(client: SegmentStoreClient) -> None:
    source = SEG + "#transaction.00000000000000000000000000000001"
    await client.create_segment(SEG)
    await client.create_segment(source)
    for name, data in ((SEG, b"target-"), (source, b"source")):
        writer = uuid.uuid4()
        await client.setup_append(name, writer)
        await (await client.append_block(writer, data, raw=True))
    assert await client.merge(SEG, source) == len(b"target-source")
    assert (await client.read_segment(SEG, 0)).data == b"target-source"
    with pytest.raises(c.SegmentNotFoundError):
        await client.get_info(source)


async def test_attributes(client: SegmentStoreClient) -> None:
    await client.create_segment(SEG)
    attribute = uuid.uuid4()
    assert await client.get_attribute(SEG, attribute) == c.NULL_ATTRIBUTE_VALUE
    assert await client.update_attribute(SEG, attribute, 5) is True
    assert await client.update_attribute(SEG, attribute, 7, expected_value=6) is False
    assert await client.update_attribute(SEG, attribute, 7, expected_value=5) is True
    assert await client.get_attribute(SEG, attribute) == 7


async def test_lifecycle_errors(client: SegmentStoreClient) -> None:
    await client.create_segment(SEG)
    with pytest.raises(c.SegmentExistsError):
        await client.create_segment(SEG)
    with pytest.raises(c.SegmentNotFoundError) as missing:
        await client.read_segment("sc/st/9.#epoch.0", 0)
    assert missing.value.segment == "sc/st/9.#epoch.0"
    await client.delete(SEG)
    with pytest.raises(c.SegmentNotFoundError):
        await client.get_info(SEG)
    with pytest.raises(c.SegmentNotFoundError):
        await client.setup_append(SEG, uuid.uuid4())


async def test_bad_arguments_get_error_message(raw: RawConnection, store) -> None:
    await store.create_segment(SEG)
    await raw.send(wire.ReadSegment(SEG, -5, 10, "", 7))
    reply = await raw.recv()
    assert isinstance(reply, wire.ErrorMessage)
    assert (reply.request_id, reply.error_code) == (7, wire.ERROR_ILLEGAL_ARGUMENT)
    await raw.send(wire.CreateSegment(8, "", 0, 0, ""))
    reply = await raw.recv()
    assert isinstance(reply, wire.ErrorMessage) and reply.request_id == 8


async def test_unsupported_commands(raw: RawConnection, store) -> None:
    await raw.send(wire.SealTableSegment(5, "sc/rg_kvtable/0.#epoch.0", ""))
    reply = await raw.recv()
    assert reply == wire.OperationUnsupported(5, "SealTableSegment", reply.server_stack_trace)
    await store.create_segment(SEG)
    await store.create_segment("other")
    update = wire.ConditionalAttributeUpdate(uuid.uuid4(), 1, 1, 0)
    await raw.send(wire.MergeSegments(6, SEG, "other", "", (update,)))
    assert isinstance(await raw.recv(), wire.OperationUnsupported)
    await raw.send(wire.KeepAlive())  # answered in kind, at once
    assert await raw.recv() == wire.KeepAlive()
    await raw.send(wire.FlushToStorage(0, "", 9))
    assert (await raw.recv()).request_id == 9


async def test_append_without_setup_is_refused(raw: RawConnection, store) -> None:
    await store.create_segment(SEG)
    data = framed(b"x")
    await raw.send(wire.AppendBlockEnd(uuid.uuid4(), len(data), data, 1, 1, 4))
    reply = await raw.recv()
    assert isinstance(reply, wire.ErrorMessage) and reply.request_id == 4
    assert (await store.get_info(SEG)).length == 0


async def test_invalid_blocks(raw: RawConnection, store) -> None:
    writer = await set_up_writer(raw, store)
    data = framed(b"x")
    await raw.send(wire.AppendBlockEnd(writer, len(data), data, 0, 1, 2))
    reply = await raw.recv()
    assert isinstance(reply, wire.InvalidEventNumber)
    assert (reply.writer_id, reply.request_id) == (writer, 2)
    assert (await store.get_info(SEG)).length == 0


async def test_blocks_refused_behind_a_pending_one_are_answered_after_it(
    raw: RawConnection, store
) -> None:
    """One buffer: a good block, then blocks refused before the store (event number going
    back, sizes that disagree) and a good one: replies in that order, nothing lost."""
    writer = await set_up_writer(raw, store)
    data = framed(b"x")
    blocks = [
        wire.AppendBlockEnd(writer, len(data), data, 1, 5, 10),
        wire.AppendBlockEnd(writer, len(data), data, 1, 4, 11),  # goes back
        wire.AppendBlockEnd(writer, len(data) + 1, data, 1, 6, 12),  # a partial event
        wire.AppendBlockEnd(writer, len(data), data, 1, 7, 13),  # after a gap: refused too
    ]
    await raw.send_bytes(b"".join(wire.encode_frame(b) for b in blocks))
    replies = [await raw.recv() for _ in blocks]
    assert [r.request_id for r in replies] == [10, 11, 12, 13]
    assert isinstance(replies[0], wire.DataAppended) and replies[0].event_number == 5
    assert isinstance(replies[1], wire.InvalidEventNumber)
    assert [type(r) for r in replies[2:]] == [wire.ErrorMessage] * 2
    assert (await store.get_info(SEG)).length == len(data)


async def test_block_without_request_id(raw: RawConnection, store) -> None:
    """Old clients leave out AppendBlockEnd's trailing request id (read as -1)."""
    writer = await set_up_writer(raw, store)
    data = framed(b"x")
    frame = wire.encode_frame(wire.AppendBlockEnd(writer, len(data), data, 1, 1, 7))
    header = struct.pack(">ii", wire.AppendBlockEnd.TYPE, len(frame) - 16)
    await raw.send_bytes(header + frame[8:-8])
    reply = await raw.recv()
    assert isinstance(reply, wire.DataAppended)
    assert (reply.writer_id, reply.event_number, reply.request_id) == (writer, 1, -1)
    assert reply.current_segment_write_offset == len(data)


async def test_create_transient_segment(raw: RawConnection, store) -> None:
    await store.create_segment(SEG)
    writer = uuid.uuid4()
    await raw.send(wire.CreateTransientSegment(3, writer, SEG, ""))
    reply = await raw.recv()
    assert isinstance(reply, wire.SegmentCreated)
    assert reply.segment.startswith(f"{SEG}#transient.{writer.hex}.")
    assert (await store.get_info(reply.segment)).exists


async def test_server_stop_fails_pending_client_calls(make_server) -> None:
    server = await make_server(read_tail_wait_seconds=5.0)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    await client.create_segment(SEG)
    read = asyncio.ensure_future(client.read_segment(SEG, 0))
    await asyncio.sleep(0.1)
    await server.stop()
    with pytest.raises(c.ConnectionLostError):
        await asyncio.wait_for(read, 5)


async def test_writers_per_connection_are_bounded(make_server, open_raw, store) -> None:
    server = await make_server(writers_per_connection_max=2)
    await store.create_segment(SEG)
    conn = await open_raw(server.port)
    for request_id in (1, 2):
        await conn.send(wire.SetupAppend(request_id, uuid.uuid4(), SEG, ""))
        assert isinstance(await conn.recv(), wire.AppendSetup)
    await conn.send(wire.SetupAppend(3, uuid.uuid4(), SEG, ""))
    reply = await conn.recv()
    assert isinstance(reply, wire.ErrorMessage) and reply.request_id == 3
    await conn.close()


async def test_backpressure_pauses_and_resumes_reading(make_server, store) -> None:
    server = await make_server(appends_in_flight_max=2, append_bytes_in_flight_max=100)
    limits = c.AppendLimits(block_bytes_max=64, blocks_in_flight_max=32)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    futures = [await client.append_block(writer, b"x" * 20) for _ in range(500)]
    acks = await asyncio.wait_for(asyncio.gather(*futures), 30)
    assert acks[-1].event_number == 500
    assert (await store.get_info(SEG)).length == 500 * 28
    await client.close()


async def test_locate_offset_finds_the_next_event_boundary(
    client: SegmentStoreClient, store: SegmentStore
) -> None:
    """LocateOffset: the first boundary at or after the target, events larger than a walk's
    read stepped over, the start offset and the length at the ends, a segment of other bytes
    refused with a clear error (and the node serving on)."""
    from segment_app.server import locate

    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    big = b"B" * (locate.WALK_READ_BYTES + 100)
    sizes = [10, 20, len(big), 5, 30]
    await (await client.append_block(writer, [b"a" * 10, b"b" * 20, big, b"c" * 5, b"d" * 30]))
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + 8 + size)
    length = starts[-1]
    for target, expected in [
        (0, 0), (1, starts[1]), (starts[1], starts[1]), (starts[1] + 1, starts[2]),
        (starts[2] + 5, starts[3]), (starts[3] - 1, starts[3]), (starts[4] + 1, starts[5]),
        (length, length), (length + 1000, length),
    ]:  # fmt: skip
        assert await client.locate_offset(SEG, target) == expected, target
    await client.truncate(SEG, starts[2])
    assert await client.locate_offset(SEG, 3) == starts[2]
    assert await client.locate_offset(SEG, starts[2] + 1) == starts[3]

    await client.create_segment("sc/st/1.#epoch.0")
    await store.append("sc/st/1.#epoch.0", b"not events at all, just bytes")
    with pytest.raises(c.InvalidArgumentError, match="not written as events"):
        await client.locate_offset("sc/st/1.#epoch.0", 3)
    with pytest.raises(c.InvalidArgumentError, match="negative"):
        await client.locate_offset(SEG, -1)
    assert await client.locate_offset(SEG, starts[4]) == starts[4]
