"""Many AppendBlockEnd commands in one received buffer, for several segments and writers."""

from __future__ import annotations

import uuid
from typing import Any

from millrace.kernel import wire as wire

SEGMENTS = [f"sc/st/{i}.#epoch.0" for i in range(6)]  # spread over the fixture's 2 containers


def framed(*events: bytes) -> bytes:
    return b"".join(wire.encode_frame(wire.Event(e)) for e in events)


async def test_blocks_of_one_buffer_are_grouped_and_acknowledged_in_order(
    server, store, open_raw
) -> None:
    conn = await open_raw(server.port)
    writers = [uuid.uuid4() for _ in SEGMENTS]
    for i, (segment, writer) in enumerate(zip(SEGMENTS, writers, strict=True)):
        await store.create_segment(segment)
        await conn.send(wire.SetupAppend(i, writer, segment, ""))
        assert isinstance(await conn.recv(), wire.AppendSetup)
    await store.seal(SEGMENTS[5])
    calls: list[int] = []
    group = store.append_group_nowait

    def spy(items: Any) -> Any:
        calls.append(len(items))
        return group(items)

    store.append_group_nowait = spy
    rounds = 40
    blocks, request_id, expected = [], 1000, {}
    for n in range(1, rounds + 1):  # round-robin: every block one event
        for segment, writer in zip(SEGMENTS, writers, strict=True):
            data = framed(b"%s-%03d" % (segment.encode(), n))
            request_id += 1
            blocks.append(wire.AppendBlockEnd(writer, len(data), data, 1, n, request_id))
            expected.setdefault(writer, []).append((n, request_id, data))
    await conn.send_bytes(b"".join(wire.encode_frame(b) for b in blocks))
    replies = [await conn.recv() for _ in blocks]
    writer_of = {b.request_id: b.writer_id for b in blocks}
    by_writer: dict[uuid.UUID, list[Any]] = {}
    for reply in replies:
        by_writer.setdefault(writer_of[reply.request_id], []).append(reply)
    for segment, writer in zip(SEGMENTS[:5], writers[:5], strict=True):
        got = by_writer[writer]
        assert all(isinstance(r, wire.DataAppended) for r in got)
        assert [(r.event_number, r.request_id) for r in got] == [
            (n, rid) for n, rid, _ in expected[writer]
        ]
        offsets = [r.current_segment_write_offset for r in got]
        data = b"".join(d for _, _, d in expected[writer])
        assert offsets[-1] == len(data) and offsets == sorted(offsets)
        assert (await store.read(segment, 0, len(data))).data == data
    sealed = by_writer[writers[5]]
    assert [type(r) for r in sealed] == [wire.SegmentIsSealed] * rounds
    assert [r.request_id for r in sealed] == [rid for _, rid, _ in expected[writers[5]]]
    assert sum(calls) == len(blocks)
    assert len(calls) < len(blocks) / 4, calls  # blocks were grouped per received buffer
    await conn.close()
