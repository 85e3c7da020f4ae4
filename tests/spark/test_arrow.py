"""Events to Arrow and back without Spark: the headers found and stripped right whatever the
events' sizes, a partial event left for the next read, a bad header refused."""

from __future__ import annotations

import pyarrow as pa
import pytest

from millrace.client.batch import SegmentRange
from millrace.client.events import EVENT_HEADER, EventFormatError
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
