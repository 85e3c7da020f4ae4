"""Events to and from Arrow, a column at a time (executors).

A read hands Spark record batches cut straight from the bytes the segment store returned: the
event headers are found (all at once where the events are of one size, else one by one) and
stripped with numpy, and the payloads become one Arrow binary array without a Python object
per event. A write takes Spark's record batches and gives the client whole columns.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from millrace.client.batch import SegmentRange
from millrace.client.events import EVENT_BYTES_MAX, EVENT_TYPE, EventFormatError
from millrace.client.events import EVENT_HEADER as HEADER
from millrace.client.routing import key_point
from millrace.kernel.memory import keep_freed_memory

#: Routing keys a writing task remembers the segment of (past that, a batch's new keys are
#: hashed for that batch only).
KNOWN_KEYS_MAX = 1 << 16
#: The columns a read gives, in order (``SCHEMA`` in ``source``).
READ_COLUMNS = ["event", "scope", "stream", "segment_id", "offset", "routing_key"]


@functools.cache
def reuse_freed_memory() -> None:
    """Once per Python worker: Arrow's buffers from glibc's heap, kept when freed
    (``millrace.kernel.memory``), not from its own allocator, which hands freed pages back at once.
    A task's batches then reuse the same memory: a 1 GB write took a worker's page faults
    from ~350,000 to ~10,000 and its system time from 1.6 s to 0.8 (docs/BENCHMARKS.md)."""
    keep_freed_memory()
    pa.set_memory_pool(pa.system_memory_pool())


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


def event_column(batch: Any) -> Any:
    """The ``event`` column of a record batch Spark hands a writing task, as binary."""
    events = batch.column(batch.schema.names.index("event"))
    if events.null_count:
        raise ValueError("millrace: a row's 'event' is null")
    if pa.types.is_string(events.type):
        events = events.view(pa.binary())  # (the same buffers, not copied)
    elif not pa.types.is_binary(events.type):
        events = events.cast(pa.binary())
    return events


def columns_of(batch: Any) -> tuple[list[bytes], list[str | None]]:
    """The events (as ``bytes``) and routing keys of a record batch, each column converted
    at once (for the plain writer)."""
    datas = event_column(batch).to_pylist()
    names = batch.schema.names
    if "routing_key" in names:
        keys = batch.column(names.index("routing_key")).to_pylist()
    else:
        keys = [None] * len(datas)
    return datas, keys


class Framer:
    """Cuts a writing task's record batches into framed pieces per segment of a key space:
    each row's segment found from its routing key (each distinct key hashed once, up to
    ``KNOWN_KEYS_MAX`` of them; a row without one goes to a random point, as the client
    does), each segment's events framed with their headers in one go and cut at event
    boundaries into pieces of about ``piece_bytes``."""

    def __init__(self, ranges: list[tuple[float, float]], piece_bytes: int = 1 << 20) -> None:
        self.starts = np.array([start for start, _ in ranges])
        self.ends = np.array([end for _, end in ranges])
        self.piece_bytes = piece_bytes
        #: the routing keys seen so far, and each one's segment
        self.known: list[str] = []
        self.known_segments = np.zeros(0, np.int64)
        self._value_set: Any = None
        self.rng = np.random.default_rng()

    def parts(self, *batches: Any) -> dict[int, list[memoryview]]:
        """Each segment's framed pieces (read-only views) of the rows of ``batches``, in their
        order, by index into the ranges. Several batches at once are framed into one table
        (each segment's rows of all of them side by side, so fewer, larger pieces)."""
        columns = [column for column in map(event_column, batches) if len(column)]
        if not columns:
            return {}
        where = self.segments_of(*batches)
        table = framed_by_segment(columns, where, len(self.starts), self.piece_bytes)
        if table is not None:
            return table
        events = columns[0] if len(columns) == 1 else pa.concat_arrays(columns)
        if len(self.starts) == 1:
            return {0: frame(events, self.piece_bytes)}
        parts = {}
        for index in np.unique(where):
            rows = events.take(pa.array(np.flatnonzero(where == index)))
            parts[int(index)] = frame(rows, self.piece_bytes)
        return parts

    def segments_of(self, *batches: Any) -> np.ndarray:
        """Each row's segment (an index into the key space's ranges), the rows of ``batches``
        in order: the keys looked up among those seen so far in one vectorised pass
        (``index_in``); only a key not seen before is hashed, in Python, once."""
        count = sum(batch.num_rows for batch in batches)
        if len(self.starts) == 1:
            return np.zeros(count, np.int64)
        if not count or "routing_key" not in batches[0].schema.names:
            return self._random(count)
        columns = [batch.column(batch.schema.names.index("routing_key")) for batch in batches]
        keys = columns[0] if len(columns) == 1 else pa.concat_arrays(columns)  # (keys: small)
        found = pc.index_in(keys, value_set=self._known_as(keys.type))
        if found.null_count > keys.null_count:  # keys not seen before
            new = pc.unique(keys.filter(pc.and_(found.is_null(), keys.is_valid()))).to_pylist()
            if len(self.known) + len(new) > KNOWN_KEYS_MAX:  # too many to keep: this batch's
                encoded = keys.dictionary_encode()
                routes = self._routes(encoded.dictionary.to_pylist())
                return self._placed(routes, encoded.indices)
            self.known += new
            self.known_segments = np.append(self.known_segments, self._routes(new))
            self._value_set = None
            found = pc.index_in(keys, value_set=self._known_as(keys.type))
        return self._placed(self.known_segments, found)

    def _placed(self, lookup: np.ndarray, found: Any) -> np.ndarray:
        """Each row's segment from its key's index into ``lookup``; a row without a key at
        random."""
        if found.null_count == len(found):  # (no key at all: nothing to look up)
            return self._random(len(found))
        where = lookup[found.fill_null(0).to_numpy()]
        if found.null_count:
            nulls = np.flatnonzero(found.is_null().to_numpy(zero_copy_only=False))
            where[nulls] = self._random(len(nulls))
        return where

    def _known_as(self, kind: Any) -> Any:
        if self._value_set is None or self._value_set.type != kind:
            self._value_set = pa.array(self.known, kind)
        return self._value_set

    def _routes(self, keys: list[str]) -> np.ndarray:
        """Each key's segment: its point hashed (``key_point``), all looked up at once."""
        points = np.fromiter(map(key_point, keys), np.float64, len(keys))
        found = np.searchsorted(self.ends, points, "left").astype(np.int64)
        return np.minimum(found, len(self.ends) - 1)  # (as ``KeySpace.segment_for``)

    def _random(self, count: int) -> np.ndarray:
        return np.searchsorted(self.starts, self.rng.random(count), "right") - 1


def framed_by_segment(
    columns: list[Any], where: np.ndarray, segments: int, piece_bytes: int
) -> dict[int, list[memoryview]] | None:
    """For binary arrays (one after the other, none empty) whose events are all of one
    (non-zero) size: every row framed in one table of header and payload, the rows grouped by
    segment in their order (a stable sort), each payload copied once, straight to its row;
    each segment's rows cut evenly into views of at most about ``piece_bytes``. None for
    events of mixed sizes (``frame`` per segment does those)."""
    payloads, size = [], -1
    for events in columns:
        count = len(events)
        _, offsets_buffer, data_buffer = events.buffers()
        offsets = np.frombuffer(offsets_buffer, np.int32, count + 1, events.offset * 4)
        size = int(offsets[1]) - int(offsets[0]) if size < 0 else size
        if size <= 0 or size > EVENT_BYTES_MAX or not (np.diff(offsets) == size).all():
            return None  # (frame() refuses an oversized event by name)
        kind = np.dtype((np.void, size))
        payloads.append(np.frombuffer(data_buffer, kind, count, int(offsets[0])))
    count, stride = len(where), HEADER.size + size
    table = np.empty((count, stride), np.uint8)
    table[:, : HEADER.size] = np.frombuffer(HEADER.pack(EVENT_TYPE, size), np.uint8)
    rows = np.ndarray((count,), np.dtype((np.void, size)), table, HEADER.size, (stride,))
    place = np.arange(count)  # each row's place once grouped by segment
    if segments > 1:
        small = where.astype(np.int16) if segments <= np.iinfo(np.int16).max else where
        place[np.argsort(small, kind="stable")] = place.copy()  # (16-bit keys: a radix sort)
    row = 0
    for data in payloads:
        rows[place[row : row + len(data)] if segments > 1 else slice(row, row + len(data))] = data
        row += len(data)
    flat = read_only_view(table)
    parts: dict[int, list[memoryview]] = {}
    row = 0
    for index, rows_of in enumerate(np.bincount(where, minlength=segments).tolist()):
        if rows_of:
            pieces = -(-rows_of // max(1, piece_bytes // stride))  # (as few as fit, even)
            per_piece = -(-rows_of // pieces)
            parts[index] = [
                flat[start * stride : min(start + per_piece, row + rows_of) * stride]
                for start in range(row, row + rows_of, per_piece)
            ]
            row += rows_of
    return parts


def read_only_view(array: np.ndarray) -> memoryview:
    """A new array's bytes as one flat read-only view: the client sends such pieces from where
    they are instead of copying them (``millrace.client.transport.append_blocks.kept_as_is``), which
    read-only promises they stay as they are."""
    array.flags.writeable = False
    return memoryview(array.reshape(-1))


def frame(events: Any, piece_bytes: int) -> list[memoryview]:
    """A binary array's events, each behind its header, cut at event boundaries into pieces
    of at most ``piece_bytes`` (or one event, if larger)."""
    count = len(events)
    if not count:
        return []
    _, offsets_buffer, data_buffer = events.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32, count + 1, events.offset * 4)
    first = int(offsets[0])
    lengths = np.diff(offsets)
    if lengths.max() > EVENT_BYTES_MAX:
        raise ValueError(
            f"millrace: an event holds at most {EVENT_BYTES_MAX} bytes; a row's 'event' has"
            f" {int(lengths.max())}"
        )
    total = int(offsets[-1]) - first
    data = np.frombuffer(data_buffer, np.uint8, total, first) if total else np.empty(0, np.uint8)
    headers = np.zeros((count, HEADER.size), np.uint8)
    headers[:, 4:] = lengths.astype(">i4").view(np.uint8).reshape(count, 4)
    ends = offsets[1:].astype(np.int64) - first + HEADER.size * np.arange(1, count + 1)
    if (lengths == lengths[0]).all():  # one size: a table of header and payload
        table = np.empty((count, HEADER.size + int(lengths[0])), np.uint8)
        table[:, : HEADER.size] = headers
        table[:, HEADER.size :] = data.reshape(count, -1)
        out = read_only_view(table)
    else:
        framed = np.empty(total + HEADER.size * count, np.uint8)
        is_header = np.zeros(len(framed), bool)
        begins = ends - lengths - HEADER.size
        is_header[(begins[:, None] + np.arange(HEADER.size)).ravel()] = True
        framed[is_header] = headers.ravel()
        framed[~is_header] = data
        out = read_only_view(framed)
    pieces, start, done = [], 0, 0
    while done < count:
        upto = max(int(np.searchsorted(ends, start + piece_bytes, "right")), done + 1)
        end = int(ends[upto - 1])
        pieces.append(out[start:end])
        start, done = end, upto
    return pieces
