"""The segment store client: batching, lost connections, the sync wrapper."""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from typing import Any

import pytest

from millrace.client.transport import segment_store as c
from millrace.client.transport.append_blocks import block_data
from millrace.client.transport.segment_store import AppendLimits, SegmentStoreClient
from millrace.client.transport.sync import SyncSegmentStoreClient
from millrace.kernel import wire as wire

SEG = "sc/st/0.#epoch.0"


class SilentPeer:
    """A test peer that answers Hello and SetupAppend, swallows appends, and can hang up."""

    def __init__(self) -> None:
        self.blocks: list[wire.AppendBlockEnd] = []
        self.others: list[object] = []  # every other command, unanswered
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                type_code, length = struct.unpack(">ii", await reader.readexactly(8))
                cmd = wire.decode_frame(type_code, await reader.readexactly(length))
                if isinstance(cmd, wire.Hello):
                    writer.write(wire.encode_frame(wire.Hello(17, 5)))
                elif isinstance(cmd, wire.SetupAppend):
                    reply = wire.AppendSetup(cmd.request_id, cmd.segment, cmd.writer_id, 4)
                    writer.write(wire.encode_frame(reply))
                elif isinstance(cmd, wire.AppendBlockEnd):
                    self.blocks.append(cmd)
                else:
                    self.others.append(cmd)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    async def hang_up(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def test_lost_connection_reports_unacked_events() -> None:
    peer = SilentPeer()
    port = await peer.start()
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    writer = uuid.uuid4()
    assert await client.setup_append(SEG, writer) == 4  # numbering continues at 5
    first = await client.append_block(writer, [b"a", b"b"])
    second = await client.append_block(writer, b"c")
    while len(peer.blocks) < 1:
        await asyncio.sleep(0.01)
    await peer.hang_up()
    with pytest.raises(c.AppendsLostError) as info:
        await first
    assert info.value.unacked_event_numbers == [5, 6, 7]
    assert info.value.unacked_events[0] == (5, b"a")
    assert info.value.writer_id == writer
    with pytest.raises(c.AppendsLostError):
        await second
    with pytest.raises(c.ConnectionLostError):
        await client.get_info(SEG)


async def test_blocks_respect_size_and_in_flight_limits() -> None:
    peer = SilentPeer()
    port = await peer.start()
    limits = AppendLimits(block_bytes_max=100, blocks_in_flight_max=2)
    client = await SegmentStoreClient.connect("127.0.0.1", port, limits=limits)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    for _ in range(6):  # events 5..10, 48 bytes framed: two per block
        await client.append_block(writer, bytes(40))
    blocked = asyncio.ensure_future(client.append_block(writer, bytes(40)))
    await asyncio.sleep(0.2)
    assert not blocked.done()  # two blocks in flight, open block full: the caller waits
    assert len(peer.blocks) == 2
    assert [b.num_events for b in peer.blocks] == [2, 2]
    assert [b.last_event_number for b in peer.blocks] == [6, 8]
    assert all(b.size_of_whole_events == len(b.data) == 96 for b in peer.blocks)
    await peer.hang_up()
    with pytest.raises(c.ConnectionLostError):
        await asyncio.wait_for(blocked, 5)


async def test_raw_appends_and_flush(client: SegmentStoreClient, store) -> None:
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    await client.append_block(writer, [b"ab", b"cd"], raw=True)
    await client.append_block(writer, b"ef", raw=True)
    await client.flush(writer)
    assert (await store.read(SEG, 0, 100)).data == b"abcdef"
    empty = await client.append_block(writer, [])
    assert (await empty).event_number == 3


async def test_raw_read_only_views_are_sent_as_they_are_other_buffers_copied(
    client: SegmentStoreClient, store
) -> None:
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    big = bytes(range(256)) * 2048  # 512 KiB: written to the socket alone, not joined
    view = memoryview(big)
    assert block_data((view,), -1, True) is view  # (no copy of a one-buffer raw block)
    mutable = bytearray(b"as appended")
    await client.append_block(writer, [view], raw=True)
    await client.append_block(writer, mutable, raw=True)
    mutable[:] = b"changed after"  # (before the flush: the client must have copied it)
    await client.append_block(writer, [view[:1000].toreadonly()], raw=True)
    await client.flush(writer)
    assert (await store.read(SEG, 0, 2 << 20)).data == big + b"as appended" + big[:1000]


async def test_a_call_cut_short_by_a_seal_tells_how_much_of_it_was_stored(
    server, store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One call of 8 events goes in blocks of 2, one at a time. The segment is sealed right
    after the first block: the call fails, and the session tells that events up to 2 are
    stored (a writer re-routes only the rest to the successors, not all 8 again)."""
    limits = AppendLimits(block_events_max=2, blocks_in_flight_max=1, small_block_bytes=0)
    client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    assert await client.setup_append(SEG, writer) == c.NO_EVENT_NUMBER
    assert client.acked_event_number(writer) == c.NO_EVENT_NUMBER
    take = store.append_group_nowait
    seals: list[asyncio.Task[int]] = []

    def take_then_seal(items):  # (the seal queues behind the first block's append)
        parts = take(items)
        if not seals:
            seals.append(asyncio.ensure_future(store.seal(SEG)))
        return parts

    monkeypatch.setattr(store, "append_group_nowait", take_then_seal)
    with pytest.raises(c.SegmentSealedError):
        await (await client.append_block(writer, [b"%d" % i for i in range(1, 9)]))
    assert await seals[0] == 2 * (8 + 1)  # the segment holds the first block only
    assert client.acked_event_number(writer) == 2
    assert (await store.read(SEG, 0, 100)).data == block_data((b"1", b"2"), 1, False)
    await client.close()


async def test_append_errors_are_typed(client: SegmentStoreClient) -> None:
    with pytest.raises(c.InvalidArgumentError):
        await client.append_block(uuid.uuid4(), b"never set up")
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    await client.seal(SEG)
    with pytest.raises(c.SegmentSealedError):
        await (await client.append_block(writer, b"x"))
    with pytest.raises(c.SegmentSealedError):  # the session stays failed
        await client.append_block(writer, b"y")


async def test_version_mismatch_is_refused() -> None:
    async def old_server(reader, writer) -> None:
        await reader.readexactly(16)
        writer.write(wire.encode_frame(wire.Hello(4, 1)))

    server = await asyncio.start_server(old_server, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with pytest.raises(c.ConnectionLostError, match=r"versions 1\.\.4"):
        await SegmentStoreClient.connect("127.0.0.1", port)
    server.close()


async def test_error_reply_mapping() -> None:
    cases = [
        (wire.NoSuchSegment(1, "s"), c.SegmentNotFoundError),
        (wire.SegmentAlreadyExists(1, "s"), c.SegmentExistsError),
        (wire.SegmentIsSealed(1, "s"), c.SegmentSealedError),
        (wire.SegmentIsTruncated(1, "s", 5), c.SegmentTruncatedError),
        (wire.WrongHost(1, "s", ""), c.ContainerOfflineError),
        (wire.InvalidEventNumber(uuid.uuid4(), 1), c.BadEventNumberError),
        (wire.ConditionalCheckFailed(uuid.uuid4(), 1, 1), c.BadOffsetError),
        (wire.AuthTokenCheckFailed(1, "", 1), c.AuthTokenCheckFailedError),
        (wire.OperationUnsupported(1, "x"), c.OperationUnsupportedError),
        (wire.ErrorMessage(1, "s", "m", 0), c.InvalidArgumentError),
        (wire.ErrorMessage(1, "s", "m", -1), c.ServerError),
    ]
    for reply, error in cases:
        assert type(c.error_from_reply(reply)) is error
    assert c.error_from_reply(wire.SegmentIsTruncated(1, "s", 5)).start_offset == 5


async def test_sync_client(server) -> None:
    """The blocking client runs in a worker thread while this loop serves."""

    def use_sync_client() -> c.SegmentInfo:
        with SyncSegmentStoreClient("127.0.0.1", server.port) as client:
            client.create_segment(SEG)
            writer = uuid.uuid4()
            assert client.setup_append(SEG, writer) == c.NO_EVENT_NUMBER
            futures = [client.append_block(writer, f"e{i}".encode()) for i in range(100)]
            assert [f.result(10).event_number for f in futures] == list(range(1, 101))
            first = client.read_segment(SEG, 0, 10).data
            assert first == wire.encode_frame(wire.Event(b"e0"))[:10]
            with pytest.raises(c.SegmentExistsError):
                client.create_segment(SEG)
            return client.get_info(SEG)

    info = await asyncio.to_thread(use_sync_client)
    assert info.write_offset == sum(8 + len(f"e{i}") for i in range(100))


async def _one_append_to_a_silent_peer() -> tuple[SilentPeer, SegmentStoreClient, Any]:
    """A client watching for 0.6 s of silence, its writer set up, one append sent to a peer
    that will never answer it."""
    peer = SilentPeer()
    port = await peer.start()
    client = await SegmentStoreClient.connect("127.0.0.1", port, keepalive_s=0.1, silence_s=0.6)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    return peer, client, await client.append_block(writer, [b"a"])


async def test_a_peer_that_goes_silent_is_given_up_within_the_silence() -> None:
    """The peer answers Hello and the setup, then nothing (a paused or partitioned node: no
    acknowledgement, no KeepAlive): the connection is given up once ``silence_s`` passed with
    no byte from it, and the appends in flight fail with that, instead of waiting forever."""
    peer, client, ack = await _one_append_to_a_silent_peer()
    with pytest.raises(c.AppendsLostError, match="sent nothing for"):
        await asyncio.wait_for(ack, 5)
    assert client.connection.silent
    await peer.hang_up()


async def test_without_the_liveness_watch_a_silent_peer_holds_the_appends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TEST-ONLY ``no-client-liveness``: the same silent peer holds the append for good."""
    monkeypatch.setenv("MILLRACE_TEST_UNSAFE", "no-client-liveness")
    peer, client, ack = await _one_append_to_a_silent_peer()
    await asyncio.sleep(2)
    assert not ack.done() and not client.is_closed
    await peer.hang_up()
    with pytest.raises(c.ConnectionLostError):
        await asyncio.wait_for(ack, 5)


async def test_an_idle_connection_to_a_live_node_is_kept(server) -> None:
    """Idle for many times the silence: the node answers each KeepAlive, nothing is given up."""
    client = await SegmentStoreClient.connect(
        "127.0.0.1", server.port, keepalive_s=0.1, silence_s=0.4
    )
    await client.create_segment(SEG)
    await asyncio.sleep(2)
    assert not client.is_closed
    assert (await client.get_info(SEG)).write_offset == 0
    await client.close()


async def test_a_connection_the_server_gives_up_fails_its_appends_at_once(raw_peer) -> None:
    """An ErrorMessage for no request (the server closes the connection next) ends the
    connection on the client's side too: the appends in flight fail now, not at a timeout."""
    peer, port = raw_peer
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    ack = await client.append_block(writer, [b"a"])
    while not peer.blocks:
        await asyncio.sleep(0.01)
    for out in peer.writers:  # the connection stays open: only the message says it is over
        out.write(wire.encode_frame(wire.ErrorMessage(wire.NO_REQUEST_ID, "", "bye", 0)))
    with pytest.raises(c.AppendsLostError):
        await asyncio.wait_for(ack, 5)
    await peer.hang_up()


async def test_a_late_reply_to_a_request_given_up_is_expected(raw_peer, caplog) -> None:
    """A reply that comes after its request was given up (a timed-out or cancelled call, say
    a tail read) is dropped quietly; a reply to nothing ever asked is still warned of."""
    peer, port = raw_peer
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(client.get_info(SEG), 0.2)
    (asked,) = peer.others
    info = wire.StreamSegmentInfo(asked.request_id, SEG, True, False, False, 0, 0, 0)
    stray = wire.StreamSegmentInfo(10_000, SEG, True, False, False, 0, 0, 0)
    with caplog.at_level(logging.WARNING, logger="millrace.client.transport.connection"):
        for out in peer.writers:
            out.write(wire.encode_frame(info) + wire.encode_frame(stray))
        await asyncio.sleep(0.3)
    assert [r.getMessage() for r in caplog.records] == [
        f"segment store sent an unsolicited {stray!r}"
    ]
    assert not client.is_closed
    await client.close()
    await peer.hang_up()


@pytest.fixture
async def raw_peer() -> tuple[SilentPeer, int]:
    peer = SilentPeer()
    return peer, await peer.start()
