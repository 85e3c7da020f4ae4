"""Bad bytes on the wire get a clear error or a closed connection; the server keeps serving."""

from __future__ import annotations

import asyncio
import random
import struct
import uuid

import pytest

from millrace.client.transport.segment_store import AppendLimits, SegmentStoreClient
from millrace.kernel import wire as wire

SEG = "sc/st/0.#epoch.0"
#: Garbage names a segment of its own, so that a frame surviving mutation harms nobody.
FUZZ_SEG = "fuzz/target/0.#epoch.0"


async def assert_still_serving(conn, request_id: int = 999) -> None:
    await conn.send(wire.GetStreamSegmentInfo(request_id, "no/such/0.#epoch.0", ""))
    reply = await conn.recv()
    assert isinstance(reply, wire.NoSuchSegment) and reply.request_id == request_id


async def test_truncated_request_gets_error_message_and_connection_lives(raw) -> None:
    frame = wire.encode_frame(wire.SealSegment(17, SEG, ""))
    payload = frame[8:-3]
    await raw.send_bytes(struct.pack(">ii", 28, len(payload)) + payload)
    reply = await raw.recv()
    assert isinstance(reply, wire.ErrorMessage)
    assert (reply.request_id, reply.error_code) == (17, wire.ERROR_ILLEGAL_ARGUMENT)
    assert "truncated" in reply.message
    await assert_still_serving(raw)


async def test_bad_utf8_gets_error_message(raw) -> None:
    payload = struct.pack(">qH", 18, 2) + b"\xff\xfe" + struct.pack(">H", 0)
    await raw.send_bytes(struct.pack(">ii", 28, len(payload)) + payload)
    reply = await raw.recv()
    assert isinstance(reply, wire.ErrorMessage) and reply.request_id == 18
    assert "UTF-8" in reply.message
    await assert_still_serving(raw)


async def test_trailing_garbage_gets_error_message(raw) -> None:
    frame = wire.encode_frame(wire.SealSegment(19, SEG, "")) + b"junk"
    await raw.send_bytes(struct.pack(">ii", 28, len(frame) - 8) + frame[8:])
    reply = await raw.recv()
    assert isinstance(reply, wire.ErrorMessage) and reply.request_id == 19
    await assert_still_serving(raw)


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(struct.pack(">ii", 12345, 8) + bytes(8), id="unknown type"),
        pytest.param(struct.pack(">ii", 1, 0x01000000), id="oversize"),
        pytest.param(struct.pack(">ii", 1, -1), id="negative length"),
        pytest.param(struct.pack(">ii", 4, 10) + bytes(10), id="malformed append block"),
        pytest.param(struct.pack(">ii", 9, 3) + b"\x00\x05a", id="no readable request id"),
    ],
)
async def test_hopeless_frames_close_the_connection(server, open_raw, frame: bytes) -> None:
    conn = await open_raw(server.port)
    await conn.send_bytes(frame)
    assert await conn.closed_by_server()
    other = await open_raw(server.port)
    await assert_still_serving(other)
    await other.close()


async def test_client_vanishing_mid_frame(server, open_raw) -> None:
    conn = await open_raw(server.port)
    frame = wire.encode_frame(wire.ReadSegment(SEG, 0, 100, "", 1))
    await conn.send_bytes(frame[:11])
    await conn.close()
    other = await open_raw(server.port)
    await assert_still_serving(other)
    await other.close()


def garbage(rng: random.Random) -> bytes:
    """One of: random bytes, a valid header with a random payload, a mutated valid frame,
    an oversize header, or a truncated valid frame."""
    codes = sorted(wire.command_types())
    choice = rng.randrange(5)
    if choice == 0:
        return rng.randbytes(rng.randrange(1, 200))
    if choice == 1:
        payload = rng.randbytes(rng.randrange(0, 120))
        return struct.pack(">ii", rng.choice(codes), len(payload)) + payload
    valid = wire.encode_frame(
        rng.choice(
            [
                wire.SealSegment(rng.randrange(1000), FUZZ_SEG, ""),
                wire.ReadSegment(FUZZ_SEG, 0, 100, "", rng.randrange(1000)),
                wire.SetupAppend(5, uuid.uuid4(), FUZZ_SEG, ""),
                wire.MergeSegments(6, FUZZ_SEG, "x", ""),
            ]
        )
    )
    if choice == 2:
        mutated = bytearray(valid)
        for _ in range(rng.randrange(1, 4)):
            mutated[rng.randrange(8, len(mutated))] = rng.randrange(256)
        return bytes(mutated)
    if choice == 3:
        return struct.pack(">ii", rng.choice(codes), rng.randrange(0x01000000, 2**31))
    cut = rng.randrange(9, len(valid))
    return struct.pack(">ii", struct.unpack_from(">i", valid)[0], cut - 8) + valid[8:cut]


async def drain(conn, seconds: float) -> None:
    """Read whatever the server answers (or until it closes) for a little while."""
    try:
        async with asyncio.timeout(seconds):
            while await conn.reader.read(65536):
                pass
    except (TimeoutError, ConnectionError):
        pass


async def test_live_fuzz_while_another_connection_appends(server, store, open_raw) -> None:
    """Garbage on one connection at a time, while a writer keeps appending on another."""
    await store.create_segment(SEG)
    limits = AppendLimits(block_bytes_max=512, blocks_in_flight_max=4)
    writer_client = await SegmentStoreClient.connect("127.0.0.1", server.port, limits=limits)
    writer = uuid.uuid4()
    await writer_client.setup_append(SEG, writer)
    events = [f"payload-{i:06d}".encode() for i in range(3000)]

    async def keep_appending() -> list[object]:
        futures = []
        for event in events:
            futures.append(await writer_client.append_block(writer, event))
            if len(futures) % 50 == 0:
                await asyncio.sleep(0.001)
        return await asyncio.gather(*futures)

    appending = asyncio.ensure_future(keep_appending())
    rng = random.Random(20261121)
    for _ in range(60):
        conn = await open_raw(server.port, hello=rng.random() < 0.5)
        for _ in range(rng.randrange(1, 4)):
            await conn.send_bytes(garbage(rng))
        await drain(conn, 0.05)
        await conn.close()
    acks = await asyncio.wait_for(appending, 60)
    assert acks[-1].event_number == len(events)
    expected = b"".join(wire.encode_frame(wire.Event(e)) for e in events)
    data = b""
    while len(data) < len(expected):
        data += (await writer_client.read_segment(SEG, len(data), 1 << 20)).data
    assert data == expected
    fresh = await open_raw(server.port)
    await assert_still_serving(fresh)
    await fresh.close()
    await writer_client.close()
