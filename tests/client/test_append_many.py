"""``append_many``: one call hands events for many writers; order per writer, one future."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest

from millrace.client.transport import appends
from millrace.client.transport import segment_store as c
from millrace.client.transport.segment_store import AppendLimits, SegmentStoreClient
from millrace.kernel import wire as wire


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
    # Pairs as a producer hands them: a writer may come more than once in one call; an event
    # is a list of one or, like append_block takes it, one bytes object.
    pairs = [(i, [e] if n % 2 else e) for n, (i, e) in enumerate(zip(ids, events, strict=True))]
    done = await client.append_many(pairs)
    assert await asyncio.wait_for(done, 30) is None
    assert client.appends.open_bytes == 0  # every byte counted into open blocks was counted out
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
    with pytest.raises(c.InvalidArgumentError, match="exceeds 10"):
        await client.append_many([(writers[0], b"ok"), (writers[1], b"x" * 11)])
    with pytest.raises(c.InvalidArgumentError, match="no setup_append"):
        await client.append_many([(writers[0], [b"a"]), (uuid.uuid4(), [b"b"])])
    empty = await client.append_many([(writers[0], [])])
    assert empty.done()
    assert (await client.append_many([])).done()
    await client.flush()
    for segment in segments:
        assert (await client.get_info(segment)).write_offset == 0
    await client.close()


async def test_a_bad_pair_takes_back_what_the_call_had_added(server, store) -> None:
    """The common pairs are checked and added in one pass: a bad pair after them takes back
    their events, including blocks they opened, and leaves events of earlier calls queued."""
    limits = dataclasses.replace(AppendLimits(), event_bytes_max=10)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    segments, writers = await _writers(client, 3)
    # (no await between the calls that lets the loop send: writer 0's block stays open)
    first = await client.append_many([(writers[0], b"a1")])
    order = list(client.appends.completion.order)
    bad_pairs = [
        [(writers[0], b"a2"), (writers[1], b"b1"), (writers[2], b"x" * 11)],  # too large
        [(writers[0], b"a2"), (writers[1], b"b1"), (uuid.uuid4(), b"c1")],  # unknown writer
        [(writers[1], b"b1"), (writers[0], b"a2"), (writers[2], [b"c1", b"x" * 11])],  # in a list
    ]
    for pairs in bad_pairs:
        with pytest.raises(c.InvalidArgumentError):
            await client.append_many(iter(pairs))  # (an iterator, as well as a list)
        assert list(client.appends.completion.order) == order  # the blocks it opened: taken back
    with pytest.raises(ValueError):  # not a pair at all, after pairs that were added
        await client.append_many([(writers[1], b"b1"), (writers[0], b"a2"), (writers[2],)])
    assert list(client.appends.completion.order) == order
    second = await client.append_many(zip([writers[1], writers[0]], [b"b2", b"a3"], strict=True))
    await asyncio.wait_for(asyncio.gather(first, second), 10)
    expected = [framed(b"a1", b"a3"), framed(b"b2"), b""]
    for segment, data in zip(segments, expected, strict=True):
        assert (await client.read_segment(segment, 0, 1 << 20)).data == data
    ack = await (await client.append_block(writers[0], b"a4"))
    assert ack.event_number == 3  # the taken-back events were never numbered
    assert client.appends.open_bytes == 0
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


async def test_blocks_coalesce_while_the_transport_is_congested(server, store) -> None:
    """While the transport's send buffer is over its high-water mark (pause_writing), appends
    are taken but their blocks stay open and grow; when it drains (resume_writing) each writer
    sends one block of everything it gathered."""
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    segments, writers = await _writers(client, 2)
    assert client.connection.transport is not None
    protocol = client.connection.transport.get_protocol()
    protocol.pause_writing()  # as the transport does above its high-water mark
    sent = client.appends.blocks_sent
    acks = [await client.append_block(writers[0], b"a%d" % i) for i in range(3)]
    many = [await client.append_many([(writers[0], [b"x"]), (writers[1], [b"b%d" % i])])
            for i in range(2)]  # fmt: skip
    await asyncio.sleep(0.2)
    assert client.appends.blocks_sent == sent
    assert not any(f.done() for f in [*acks, *many])
    protocol.resume_writing()
    await asyncio.wait_for(asyncio.gather(*acks, *many), 10)
    assert client.appends.blocks_sent == sent + 2  # one block per writer
    assert (await client.read_segment(segments[0], 0, 1 << 20)).data == framed(
        b"a0", b"a1", b"a2", b"x", b"x"
    )
    assert (await client.read_segment(segments[1], 0, 1 << 20)).data == framed(b"b0", b"b1")
    await client.close()


async def test_appends_wait_while_congested_with_open_blocks_full(
    server, store, monkeypatch
) -> None:
    """Open blocks are bounded while congested: beyond OPEN_BYTES_MAX, append_block and
    append_many wait for the transport to drain."""
    monkeypatch.setattr(appends, "OPEN_BYTES_MAX", 100)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    segments, writers = await _writers(client, 2)
    assert client.connection.transport is not None
    protocol = client.connection.transport.get_protocol()
    protocol.pause_writing()
    first = await client.append_block(writers[0], [b"a" * 60, b"a" * 60])  # over the limit now
    one = asyncio.ensure_future(client.append_block(writers[0], b"c"))
    many = asyncio.ensure_future(client.append_many([(writers[1], [b"b"])]))
    await asyncio.sleep(0.2)
    assert not one.done() and not many.done() and not first.done()
    protocol.resume_writing()
    await asyncio.wait_for(asyncio.gather(first, await one, await many), 10)
    assert (await client.read_segment(segments[0], 0, 1 << 20)).data == framed(
        b"a" * 60, b"a" * 60, b"c"
    )
    assert (await client.read_segment(segments[1], 0, 1 << 20)).data == framed(b"b")
    assert client.appends.open_bytes == 0
    await client.close()


async def test_nothing_goes_to_a_congested_transport_and_waiting_appends_resume(
    server, store, monkeypatch
) -> None:
    """While congested, even full blocks wait in the client (the transport's buffer does not
    grow); when it drains they go, and appends waiting for room in open blocks go on even with
    no block held (here the open one lingers)."""
    monkeypatch.setattr(appends, "OPEN_BYTES_MAX", 50)
    limits = dataclasses.replace(AppendLimits(), block_bytes_max=100, linger_ms=60_000)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    segments, writers = await _writers(client, 2)
    assert client.connection.transport is not None
    protocol = client.connection.transport.get_protocol()
    protocol.pause_writing()
    # two blocks (58 bytes each with the event header): the first is full and goes, the
    # second lingers, over OPEN_BYTES_MAX
    lingering = await client.append_block(writers[1], [b"l" * 50, b"m" * 50])
    await asyncio.sleep(0.1)
    assert client.connection.out and client.connection.transport.get_write_buffer_size() == 0
    assert not client.appends._held  # (the lingering block is not due)
    waiting = asyncio.ensure_future(client.append_many([(writers[0], b"w")]))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    protocol.resume_writing()
    done = await asyncio.wait_for(waiting, 10)  # (the call went on; its block lingers)
    assert not client.connection.out
    await asyncio.wait_for(client.flush(), 10)
    assert lingering.done() and done.done()
    assert (await client.read_segment(segments[0], 0, 1 << 20)).data == framed(b"w")
    assert (await client.read_segment(segments[1], 0, 1 << 20)).data == framed(b"l" * 50, b"m" * 50)
    await client.close()


async def test_held_blocks_go_a_send_buffer_at_a_time(server, store, monkeypatch) -> None:
    """When the transport drains, held blocks go oldest first, one send buffer's worth per loop
    turn (here a few bytes: one writer per turn), until every writer's block went."""
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    segments, writers = await _writers(client, 5)
    assert client.connection.transport is not None
    protocol = client.connection.transport.get_protocol()
    protocol.pause_writing()
    sent = client.appends.blocks_sent
    done = await client.append_many([(w, [b"x%d" % i, b"y%d" % i]) for i, w in enumerate(writers)])
    await asyncio.sleep(0.1)
    assert client.appends.blocks_sent == sent and len(client.appends._held) == 5
    monkeypatch.setattr(appends, "SEND_BUFFER_BYTES", 1)
    protocol.resume_writing()
    assert (
        len(client.appends._held) == 4
    )  # the oldest went at once; the others follow, turn by turn
    await asyncio.wait_for(done, 10)
    assert client.appends.blocks_sent == sent + 5 and not client.appends._held
    for i, segment in enumerate(segments):
        data = (await client.read_segment(segment, 0, 1 << 20)).data
        assert data == framed(b"x%d" % i, b"y%d" % i)
    await client.close()


async def test_a_failed_writer_fails_only_the_calls_it_had_events_unacknowledged_in(
    server, store
) -> None:
    """Calls complete in order, but a writer's failure fails only the calls with an event of
    it not yet acknowledged: here call 1's event of writer C was acknowledged before C failed,
    so call 1 completes (when D's held block is), while call 2, whose C event was refused,
    fails."""
    # non-full blocks (D's) linger; full ones (C's, 108 bytes) go at once
    limits = dataclasses.replace(AppendLimits(), block_bytes_max=100, linger_ms=60_000)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    segments, (c_writer, d_writer) = await _writers(client, 2)
    big = b"c" * 100
    call1 = await client.append_many([(c_writer, big), (d_writer, b"d")])
    await asyncio.wait_for(client.flush(c_writer), 10)  # C's event of call 1 is durable
    assert not call1.done()  # D's block is still held
    await client.seal(segments[0])
    call2 = await client.append_many([(c_writer, big + b"2"), (d_writer, b"e")])
    with pytest.raises(c.SegmentSealedError):
        await asyncio.wait_for(call2, 10)
    assert not call1.done()
    await asyncio.wait_for(client.flush(d_writer), 10)
    assert await asyncio.wait_for(call1, 10) is None
    assert (await client.read_segment(segments[0], 0, 1 << 20)).data == framed(big)
    assert (await client.read_segment(segments[1], 0, 1 << 20)).data == framed(b"d", b"e")
    await client.close()


async def test_a_call_waiting_for_room_keeps_later_calls_behind_it(server, store) -> None:
    """A call that must wait for room in flight (here: one block of one event in flight per
    writer) holds the calls made meanwhile until it has added its events, so every writer
    gets the calls' events in the order of the calls."""
    limits = dataclasses.replace(AppendLimits(), block_events_max=1, blocks_in_flight_max=1)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    segments, writers = await _writers(client, 2)
    first = asyncio.ensure_future(client.append_many([(w, [b"1a", b"1b", b"1c"]) for w in writers]))
    await asyncio.sleep(0)  # the first call is now waiting for room
    second = asyncio.ensure_future(client.append_many([(w, b"2a") for w in writers]))
    done = await asyncio.wait_for(asyncio.gather(first, second), 10)
    await asyncio.wait_for(asyncio.gather(*done), 10)
    for segment in segments:
        data = (await client.read_segment(segment, 0, 1 << 20)).data
        assert data == framed(b"1a", b"1b", b"1c", b"2a")
    await client.close()


async def test_blocks_of_mixed_sizes_and_raw_appends(server, store) -> None:
    """Events of one size share one event header in the block's making; of several sizes each
    gets its own; raw bytes never go in a block with events."""
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    (segment,), (writer,) = await _writers(client, 1)
    futures = [
        await client.append_block(writer, [b"a", b"bbb", b"cc"]),
        await client.append_block(writer, b"RAW", raw=True),
        await client.append_block(writer, [b"dd", b"ee"]),
    ]
    await asyncio.wait_for(asyncio.gather(*futures), 10)
    data = (await client.read_segment(segment, 0, 1 << 20)).data
    assert data == framed(b"a", b"bbb", b"cc") + b"RAW" + framed(b"dd", b"ee")
    await client.close()


@pytest.mark.parametrize("api", ["append_many", "append_block"])
async def test_block_limits_hold_for_events_of_one_size_and_of_mixed_sizes(
    server, store, api
) -> None:
    """A block takes events of its first event's size up to both limits (counted as one number
    of events, not bytes per event); an event of another size makes it count bytes from there."""
    limits = dataclasses.replace(AppendLimits(), block_bytes_max=40, block_events_max=3)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    segments, writers = await _writers(client, 4)
    cases = [
        # 12 B events are 20 B with their headers: two fit in 40 B
        ([b"x" * 12] * 5, 3),
        # 1 B events: the events limit (3) comes first
        ([b"y"] * 7, 3),
        # 4, 4 (24 B) then 20 (28 B) does not fit; 20 then 4 fills a block of mixed sizes to 40
        ([b"a" * 4, b"b" * 4, b"c" * 20, b"d" * 4, b"e" * 4], 3),
        # a lone event over the bytes limit gets a block of its own
        ([b"s", b"L" * 40, b"t"], 3),
    ]
    for (events, blocks), segment, writer in zip(cases, segments, writers, strict=True):
        before = client.appends.blocks_sent
        if api == "append_many":
            done = await client.append_many([(writer, e) for e in events])
        else:
            done = await client.append_block(writer, events)
        await asyncio.wait_for(done, 10)
        assert client.appends.blocks_sent - before == blocks, events
        assert (await client.read_segment(segment, 0, 1 << 20)).data == framed(*events)
        ack = await (await client.append_block(writer, b"next"))
        assert ack.event_number == len(events) + 1  # numbering went on across the blocks
    assert client.appends.open_bytes == 0
    await client.close()


async def test_writer_handles_stand_for_writer_ids(server, store) -> None:
    """A writer's handle goes wherever its id does, mixed with ids in one call; a handle of
    another connection, a stale one (setup_append again) or anything else is refused with
    a clear error, and the call queues nothing."""
    client = await SegmentStoreClient.connect("127.0.0.1", server.port)
    other = await SegmentStoreClient.connect("127.0.0.1", server.port)
    segments, writers = await _writers(client, 2)
    handles = [client.writer_handle(w) for w in writers]
    done = await client.append_many(
        [
            (handles[0], b"a1"),
            (writers[1], b"b1"),
            (handles[1], [b"b2", b"b3"]),
            (writers[0], b"a2"),
        ]
    )
    await asyncio.wait_for(done, 10)
    ack = await (await client.append_block(handles[0], b"a3"))
    assert ack.event_number == 3
    await client.conditional_append(handles[1], b"b4", len(framed(b"b1", b"b2", b"b3")), raw=False)
    await client.flush(handles[1])
    assert (await client.read_segment(segments[0], 0, 1 << 20)).data == framed(b"a1", b"a2", b"a3")
    assert (await client.read_segment(segments[1], 0, 1 << 20)).data == framed(
        b"b1", b"b2", b"b3", b"b4"
    )

    foreign = uuid.uuid4()
    await other.create_segment("sc/other.#epoch.0")
    await other.setup_append("sc/other.#epoch.0", foreign)
    foreign_handle = other.writer_handle(foreign)
    with pytest.raises(c.InvalidArgumentError, match="another connection"):
        await client.append_many([(handles[0], b"a4"), (foreign_handle, b"x")])
    with pytest.raises(c.InvalidArgumentError, match="another connection"):
        await client.append_block(foreign_handle, b"x")
    with pytest.raises(c.InvalidArgumentError, match="not a writer id or handle"):
        await client.append_many([(handles[0], b"a4"), ("writer-0", b"x")])
    await client.setup_append(segments[1], writers[1])  # a new session: the old handle is stale
    with pytest.raises(c.InvalidArgumentError, match="stale"):
        await client.append_many([(handles[0], b"a4"), (handles[1], b"x")])
    with pytest.raises(c.InvalidArgumentError, match="stale"):
        await client.append_block(handles[1], b"x")
    done = await client.append_many([(client.writer_handle(writers[1]), b"b5")])
    await asyncio.wait_for(done, 10)
    await client.flush()
    assert (await client.read_segment(segments[0], 0, 1 << 20)).data == framed(b"a1", b"a2", b"a3")
    assert (await client.read_segment(segments[1], 0, 1 << 20)).data.endswith(framed(b"b4", b"b5"))
    await other.close()
    await client.close()
