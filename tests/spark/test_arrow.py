"""Events to Arrow and back without Spark: the headers found and stripped right whatever the
events' sizes, a partial event left for the next read, a bad header refused."""

from __future__ import annotations

import pyarrow as pa
import pytest

from millrace.client.batch import SegmentRange
from millrace.client.events import EVENT_HEADER, EventFormatError
from millrace.client.transport.append_blocks import kept_as_is
from spark_bridge import arrow

SEGMENT = SegmentRange("sc", "st", 7, "sc/st/7.#epoch.0", 0, 1 << 20, 0.0, 1.0, "h", 1, "")


def framed(*events: bytes) -> bytes:
    return b"".join(EVENT_HEADER.pack(0, len(e)) + e for e in events)


@pytest.mark.parametrize(
    "events",
    [
        [b"abc"] * 5,  # one size: found all at once
        [b"a", b"bcd", b"", b"xyz12"],  # mixed: one by one
        [b"ab"] * 3 + [b"a longer one"] + [b"ab"] * 2,  # a run of one size, then mixed
        [b""] * 4,
        [b"only"],
    ],
)
def test_events_become_one_binary_column_with_their_offsets(events: list[bytes]) -> None:
    complete = framed(*events)
    buffer = complete + framed(b"cut short")[:-3]  # the next event, partly read
    starts, used = arrow.event_starts(buffer, 1000)
    assert used == len(complete)
    batch = arrow.record_batch(SEGMENT, buffer, starts, used, 1000)
    assert batch.schema.names == arrow.READ_COLUMNS
    assert batch.column("event").to_pylist() == events
    expected_offsets, at = [], 1000
    for event in events:
        expected_offsets.append(at)
        at += EVENT_HEADER.size + len(event)
    assert batch.column("offset").to_pylist() == expected_offsets
    assert set(batch.column("segment_id").to_pylist()) == {7}
    assert set(batch.column("scope").to_pylist()) == {"sc"}
    assert batch.column("routing_key").null_count == len(events)


def test_less_than_one_event_gives_no_rows() -> None:
    starts, used = arrow.event_starts(framed(b"abcdef")[:5], 0)
    assert (len(starts), used) == (0, 0)


def test_a_bad_header_names_its_offset() -> None:
    with pytest.raises(EventFormatError, match="no event header at offset 36"):
        arrow.event_starts(framed(b"x" * 20) + b"\x00\x00\x00\x05\x00\x00\x00\x01x", 8)


def test_write_columns_of_a_record_batch() -> None:
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["a", "bb"]), pa.array(["k1", None])], names=["event", "routing_key"]
    )
    assert arrow.columns_of(batch) == ([b"a", b"bb"], ["k1", None])
    keyless = pa.RecordBatch.from_arrays([pa.array([b"x"], pa.binary())], names=["event"])
    assert arrow.columns_of(keyless) == ([b"x"], [None])
    nulls = pa.RecordBatch.from_arrays([pa.array([b"x", None], pa.binary())], names=["event"])
    with pytest.raises(ValueError, match="'event' is null"):
        arrow.columns_of(nulls)


@pytest.mark.parametrize(
    "events",
    [
        [b"e%04d" % i for i in range(1000)],  # one size
        [b"x" * (i % 37) for i in range(1000)],  # mixed, some empty
        [b"small", b"y" * 5000, b"z"],  # one event larger than a piece
    ],
)
def test_framed_pieces_hold_whole_events_in_order(events: list[bytes]) -> None:
    column = pa.array(events, pa.binary()).slice(1)  # (an offset into the buffers, as a take gives)
    pieces = arrow.frame(column, piece_bytes=1024)
    assert all(kept_as_is(p) for p in pieces)  # (read-only views: the client sends, not copies)
    assert all(len(p) <= 1024 for p in pieces if bytes(p).count(b"y" * 5000) == 0)
    assert b"".join(pieces) == framed(*events[1:])
    for piece in pieces:  # each piece is whole events
        starts, used = arrow.event_starts(piece, 0)
        assert used == len(piece) and len(starts) > 0


def test_an_oversized_event_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="at most 8388608 bytes; a row's 'event' has 8388609"):
        arrow.frame(pa.array([b"x" * (8 * 1024 * 1024 + 1)], pa.binary()), 1 << 20)


@pytest.mark.parametrize("width", [0, 4], ids=["mixed sizes", "one size"])
def test_rows_go_to_the_segment_owning_their_key(width: int) -> None:
    from millrace.client.routing import key_point

    ranges = [(0.0, 0.25), (0.25, 0.5), (0.5, 1.0)]
    keys = [f"k{i}" for i in range(300)] + [None] * 50
    batch = pa.RecordBatch.from_arrays(
        [pa.array([f"e{i:0{width}}".encode() for i in range(350)]), pa.array(keys, pa.string())],
        names=["event", "routing_key"],
    )
    framer = arrow.Framer(ranges)
    where = framer.segments_of(batch)
    for key, index in zip(keys[:300], where[:300], strict=True):
        start, end = ranges[index]
        assert start <= key_point(key) < end
    assert set(where[300:]) <= {0, 1, 2}
    parts = framer.parts(batch)
    got = {i: [e for p in pieces for e in _payloads(p)] for i, pieces in parts.items()}
    for index, found in got.items():  # each segment's keyed events in the batch's order
        keyed = [e for e in found if int(e[1:]) < 300]
        assert keyed == [f"e{i:0{width}}".encode() for i in range(300) if where[i] == index]
    assert sorted(e for found in got.values() for e in found) == sorted(
        f"e{i:0{width}}".encode() for i in range(350)
    )  # (rows without a key at random: each somewhere, once)
    small = arrow.Framer(ranges, piece_bytes=100)  # pieces of whole events, at most 100 bytes
    for pieces in small.parts(batch).values():
        assert all(0 < len(p) <= 100 and arrow.event_starts(p, 0)[1] == len(p) for p in pieces)
    keyless = pa.RecordBatch.from_arrays([pa.array([b"a", b"b"])], names=["event"])
    assert sorted(e for ps in framer.parts(keyless).values() for p in ps for e in _payloads(p)) == [
        b"a",
        b"b",
    ]


@pytest.mark.parametrize("sizes", [(6, 6, 6), (6, 9, 6)], ids=["one size", "mixed sizes"])
@pytest.mark.parametrize("ranges", [[(0.0, 1.0)], [(0.0, 0.4), (0.4, 0.7), (0.7, 1.0)]])
def test_batches_framed_together_give_each_segment_their_rows_in_order(
    sizes: tuple[int, ...], ranges: list[tuple[float, float]]
) -> None:
    """A task frames several of Spark's batches at once: each segment gets the rows of all of
    them, in order, in pieces of at most ``piece_bytes`` holding whole events."""
    batches, rows = [], []
    for number, size in enumerate(sizes):
        events = [f"{number}-{i:0{size - 2}}".encode()[:size] for i in range(500)]
        keys = [f"k{i % 37}" for i in range(500)]
        batches.append(pa.RecordBatch.from_arrays(
            [pa.array(events), pa.array(keys, pa.string())], names=["event", "routing_key"]
        ))  # fmt: skip
        rows += zip(events, keys, strict=True)
    empty = batches[0].slice(0, 0)
    framer = arrow.Framer(ranges, piece_bytes=1000)
    parts = framer.parts(batches[0], empty, *batches[1:])
    where = arrow.Framer(ranges).segments_of(*batches)
    for index in range(len(ranges)):
        pieces = parts.get(index, [])
        assert all(0 < len(p) <= 1000 and arrow.event_starts(p, 0)[1] == len(p) for p in pieces)
        got = [e for p in pieces for e in _payloads(p)]
        assert got == [event for (event, _), at in zip(rows, where, strict=True) if at == index]
    assert sum(len(_payloads(p)) for ps in parts.values() for p in ps) == len(rows)
    assert framer.parts(empty) == {}


@pytest.mark.parametrize("kind", [pa.string(), pa.binary()])
def test_one_segment_gets_every_row_in_order_and_a_string_column_its_bytes(
    kind: pa.DataType,
) -> None:
    events = [f"event-{i:05d}".encode() for i in range(3000)]  # (one size: the table path)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([e.decode() for e in events], kind) if kind == pa.string() else pa.array(events),
         pa.array([f"k{i % 7}" for i in range(3000)], pa.string())],
        names=["event", "routing_key"],
    )  # fmt: skip
    parts = arrow.Framer([(0.0, 1.0)], piece_bytes=4096).parts(batch)
    assert list(parts) == [0] and all(kept_as_is(p) for p in parts[0])
    assert [e for p in parts[0] for e in _payloads(p)] == events


def _payloads(piece: bytes) -> list[bytes]:
    starts, used = arrow.event_starts(piece, 0)
    return arrow.record_batch(SEGMENT, piece, starts, used, 0).column("event").to_pylist()


@pytest.mark.parametrize("known_max", [1 << 16, 150, 0])
def test_keys_are_placed_alike_whether_remembered_or_not(
    known_max: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches whose keys repeat, are new, or exceed what a task remembers: every keyed row
    goes to the segment owning its key; a row without one to some segment."""
    from millrace.client.routing import key_point

    monkeypatch.setattr(arrow, "KNOWN_KEYS_MAX", known_max)
    ranges = [(0.0, 0.3), (0.3, 0.6), (0.6, 1.0)]
    framer = arrow.Framer(ranges)
    for first in (0, 100, 0, 250):
        keys = [f"key-{first + i % 120}" for i in range(400)] + [None] * 7
        columns = [pa.array([b"e"] * len(keys)), pa.array(keys, pa.string())]
        batch = pa.RecordBatch.from_arrays(columns, names=["event", "routing_key"])
        where = framer.segments_of(batch)
        for key, index in zip(keys[:400], where[:400], strict=True):
            start, end = ranges[index]
            assert start <= key_point(key) < end
        assert set(where[400:]) <= {0, 1, 2}
    assert len(framer.known) == {1 << 16: 340, 150: 120, 0: 0}[known_max]  # (past 150: kept 120)
    nulls = pa.RecordBatch.from_arrays(
        [pa.array([b"e"] * 5), pa.array([None] * 5, pa.string())], names=["event", "routing_key"]
    )
    assert set(framer.segments_of(nulls)) <= {0, 1, 2}
