"""Events to and from Arrow, a column at a time (executors).

A read hands Spark record batches cut straight from the bytes the segment store returned: the
event headers are found (all at once where the events are of one size, else one by one) and
stripped with numpy, and the payloads become one Arrow binary array without a Python object
per event. A write takes Spark's record batches and gives the client whole columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from millrace.client.batch import SegmentRange
from millrace.client.events import EVENT_BYTES_MAX, EVENT_TYPE, EventFormatError
from millrace.client.events import EVENT_HEADER as HEADER

#: The columns a read gives, in order (``SCHEMA`` in ``source``).
READ_COLUMNS = ["event", "scope", "stream", "segment_id", "offset", "routing_key"]


def event_starts(buffer: bytes, base: int) -> tuple[np.ndarray, int]:
    """Where the complete events of ``buffer`` (read at segment offset ``base``) start, and
    where the first incomplete one does (or ``len(buffer)``)."""
    size = len(buffer)
    if size < HEADER.size:
        return np.empty(0, np.int64), 0
    _check(buffer, 0, base)
    stride = HEADER.size + HEADER.unpack_from(buffer, 0)[1]
    count = size // stride
    run = count
    if count > 1:  # events of the first one's size: every header alike, checked at once
        grid = np.frombuffer(buffer, np.uint8, count * stride).reshape(count, stride)
        alike = (grid[:, : HEADER.size] == grid[0, : HEADER.size]).all(axis=1)
        run = count if alike.all() else int(np.argmin(alike))
    starts = [np.arange(run, dtype=np.int64) * stride]
    position = run * stride
    more: list[int] = []
    while size - position >= HEADER.size:  # the rest one by one
        length = _check(buffer, position, base)
        if position + HEADER.size + length > size:
            break
        more.append(position)
        position += HEADER.size + length
    if more:
        starts.append(np.array(more, dtype=np.int64))
    return np.concatenate(starts), position


def _check(buffer: bytes, position: int, base: int) -> int:
    kind, length = HEADER.unpack_from(buffer, position)
    if kind != EVENT_TYPE or not 0 <= length <= EVENT_BYTES_MAX:
        raise EventFormatError(
            f"no event header at offset {base + position} (type {kind}, length {length})"
        )
    return int(length)


def record_batch(
    segment: SegmentRange, buffer: bytes, starts: np.ndarray, end: int, base: int
) -> Any:
    """The rows of the events starting at ``starts`` in ``buffer[:end]`` (read at ``base``)."""
    count = len(starts)
    raw = np.frombuffer(buffer, np.uint8, end)
    ends = np.append(starts[1:], end)
    lengths = ends - starts - HEADER.size
    if count and (lengths == lengths[0]).all():  # one size: drop each row's header
        payloads = raw.reshape(count, -1)[:, HEADER.size :].tobytes()
    else:
        keep = np.ones(end, dtype=bool)
        keep[(starts[:, None] + np.arange(HEADER.size)).ravel()] = False
        payloads = raw[keep].tobytes()
    offsets = np.append(starts - HEADER.size * np.arange(count), end - HEADER.size * count)
    events = pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(payloads)]
    )
    return pa.RecordBatch.from_arrays(
        [
            events,
            pa.repeat(pa.scalar(segment.scope, pa.string()), count),
            pa.repeat(pa.scalar(segment.stream, pa.string()), count),
            pa.repeat(pa.scalar(segment.segment_id, pa.int64()), count),
            pa.array(starts + base, pa.int64()),
            pa.nulls(count, pa.string()),
        ],
        names=READ_COLUMNS,
    )


def columns_of(batch: Any) -> tuple[list[bytes], list[str | None]]:
    """The events (as ``bytes``) and routing keys of a record batch Spark hands a writing
    task, each column converted at once."""
    names = batch.schema.names
    events = batch.column(names.index("event"))
    if events.null_count:
        raise ValueError("millrace: a row's 'event' is null")
    if not pa.types.is_binary(events.type):
        events = events.cast(pa.binary())  # (a string column: the same bytes)
    datas = events.to_pylist()
    if "routing_key" in names:
        keys = batch.column(names.index("routing_key")).to_pylist()
    else:
        keys = [None] * len(datas)
    return datas, keys
