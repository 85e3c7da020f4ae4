"""Consistent stream histories built in memory and saved with bulk_create (test data only).

``History`` plays scales, rolling transactions, truncations and retention cuts the way the
workflows will record them (epoch rows with their segment lists, segment records sealed with a
sealing epoch and a size, truncation and stream-cut records) so selectors can be tested on a
few epochs or on a hundred thousand without running any workflow.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection

from controller_app.choices import StreamState
from controller_app.models import (
    Epoch,
    SegmentRecord,
    Stream,
    StreamCutRecord,
    TruncationRecord,
)
from controller_app.segments import (
    Segment,
    decode_segments,
    encode_segments,
    encode_stream_cut,
    uniform_ranges,
)

START_TIME = 1_000_000
STEP_MS = 1000


def default_size(segment: Segment) -> int:
    """Size at sealing of the test segments: 1000 bytes per segment number plus one."""
    return 1000 * (segment.number + 1)


@dataclass(slots=True)
class Record:
    """A segment record being built (plain data: a hundred thousand of them build fast)."""

    segment: Segment
    sealing_epoch: int | None = None
    sealed_size: int | None = None


@dataclass(slots=True)
class EpochRow:
    epoch: int
    reference_epoch: int
    creation_time: int
    segments: list[list[Any]]

    def segment_list(self) -> tuple[Segment, ...]:
        return decode_segments(self.segments)


class History:
    """A stream's history being written; ``save()`` stores it."""

    def __init__(
        self,
        stream: Stream,
        segments: int = 2,
        start_time: int = START_TIME,
        step_ms: int = STEP_MS,
        size_of: Callable[[Segment], int] = default_size,
    ) -> None:
        self.stream = stream
        self.step_ms = step_ms
        self.size_of = size_of
        self.time = start_time
        self.epochs: list[EpochRow] = []
        self.records: dict[int, Record] = {}
        self.truncations: list[TruncationRecord] = []
        self.stream_cuts: list[StreamCutRecord] = []
        self.sealed_total = 0
        self.next_number = 0
        self.current: list[Segment] = []
        self._add_epoch(self._create(uniform_ranges(segments), epoch=0), reference=0)

    # --- reading what was built ---

    @property
    def epoch(self) -> int:
        return len(self.epochs) - 1

    def segment(self, segment_id: int) -> Segment:
        return self.records[segment_id].segment

    def records_for(self, cut: Mapping[int, int]) -> list[Segment]:
        return [self.segment(sid) for sid in cut]

    def cut(self, offset: int) -> dict[int, int]:
        """The current segments, all at ``offset``."""
        return {s.id: offset for s in self.current}

    def size_at_current(self, cut: Mapping[int, int]) -> int:
        """Bytes up to a cut of the current epoch: every sealed segment plus the cut's offsets."""
        return self.sealed_total + sum(cut.values())

    # --- changing the stream ---

    def scale(self, sealed: Iterable[int], ranges: Sequence[tuple[float, float]]) -> list[Segment]:
        """Seal ``sealed`` (ids) and create segments with ``ranges`` in a new epoch."""
        self.time += self.step_ms
        epoch = len(self.epochs)
        sealed_ids = set(sealed)
        self._seal(sealed_ids, epoch)
        new = self._create(ranges, epoch)
        kept = [s for s in self.current if s.id not in sealed_ids]
        self._add_epoch(kept + new, reference=epoch)
        return new

    def split(self, segment_id: int, parts: int = 2) -> list[Segment]:
        seg = self.segment(segment_id)
        return self.scale([segment_id], uniform_ranges(parts, seg.key_start, seg.key_end))

    def merge(self, segment_ids: Iterable[int]) -> Segment:
        ids = list(segment_ids)
        segs = [self.segment(sid) for sid in ids]
        low, high = min(s.key_start for s in segs), max(s.key_end for s in segs)
        return self.scale(ids, [(low, high)])[0]

    def roll(self, txn_epoch: int) -> None:
        """A rolling transaction: duplicate ``txn_epoch`` then the current epoch (PDP-24)."""
        self.time += self.step_ms
        current = list(self.current)
        old = self.epochs[txn_epoch].segment_list()
        for reference, source in ((txn_epoch, old), (self.epoch, current)):
            epoch = len(self.epochs)
            self._seal({s.id for s in self.current}, epoch)
            dupes = [Segment(s.number, epoch, s.key_start, s.key_end, self.time) for s in source]
            for seg in dupes:
                self.records[seg.id] = Record(seg)
            self._add_epoch(dupes, reference=reference)

    def truncate(self, cut: Mapping[int, int], deleted: Iterable[int] = ()) -> TruncationRecord:
        segs = [self.segment(sid) for sid in cut]
        high = max(s.creation_epoch for s in segs)
        low = min(self._span(sid, high) for sid in cut)
        record = TruncationRecord(
            stream=self.stream,
            number=len(self.truncations) + 1,
            stream_cut=encode_stream_cut(cut),
            segments=encode_segments(segs),
            span_low_epoch=low,
            span_high_epoch=high,
            deleted_segments=sorted(deleted),
        )
        self.truncations.append(record)
        return record

    def record_cut(self, cut: Mapping[int, int], size: int | None = None) -> StreamCutRecord:
        """A retention-set entry for ``cut`` (size computed when the cut is at the tail)."""
        record = StreamCutRecord(
            stream=self.stream,
            recording_time=self.time + len(self.stream_cuts),
            recording_size=self.size_at_current(cut) if size is None else size,
            stream_cut=encode_stream_cut(cut),
            span_high_epoch=max(sid >> 32 for sid in cut),
        )
        self.stream_cuts.append(record)
        return record

    def save(self) -> Stream:
        """Store everything: epochs and segment records in bulk, then the few other rows."""
        sid = self.stream.pk
        _insert(
            Epoch,
            ["stream_id", "epoch", "reference_epoch", "creation_time", "segments"],
            (
                (sid, e.epoch, e.reference_epoch, e.creation_time, json.dumps(e.segments))
                for e in self.epochs
            ),
        )
        _insert(
            SegmentRecord,
            [
                "stream_id",
                "number",
                "creation_epoch",
                "key_start",
                "key_end",
                "creation_time",
                "sealing_epoch",
                "sealed_size",
            ],
            (_record_row(sid, r) for r in self.records.values()),
        )
        TruncationRecord.objects.bulk_create(self.truncations)
        StreamCutRecord.objects.bulk_create(self.stream_cuts)
        Stream.objects.filter(pk=sid).update(current_epoch=self.epoch, state=StreamState.ACTIVE)
        self.stream.refresh_from_db()
        return self.stream

    # --- internals ---

    def _create(self, ranges: Sequence[tuple[float, float]], epoch: int) -> list[Segment]:
        new = []
        for start, end in ranges:
            seg = Segment(self.next_number, epoch, start, end, self.time)
            self.next_number += 1
            self.records[seg.id] = Record(seg)
            new.append(seg)
        return new

    def _seal(self, ids: set[int], epoch: int) -> None:
        for sid in ids:
            record = self.records[sid]
            record.sealing_epoch = epoch
            record.sealed_size = self.size_of(record.segment)
            self.sealed_total += record.sealed_size

    def _add_epoch(self, segments: list[Segment], reference: int) -> None:
        self.current = sorted(segments, key=lambda s: s.key_start)
        self.epochs.append(
            EpochRow(len(self.epochs), reference, self.time, [s.encode() for s in self.current])
        )

    def _span(self, segment_id: int, high: int) -> int:
        sealing = self.records[segment_id].sealing_epoch
        return high if sealing is None else min(high, sealing - 1)


def _record_row(stream_id: int, record: Record) -> tuple[Any, ...]:
    g = record.segment
    return (
        stream_id,
        g.number,
        g.creation_epoch,
        g.key_start,
        g.key_end,
        g.creation_time,
        record.sealing_epoch,
        record.sealed_size,
    )


def _insert(model: type, columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
    """Insert many rows fast: COPY on PostgreSQL, executemany elsewhere (test data only)."""
    table = model._meta.db_table  # type: ignore[attr-defined]
    names = ", ".join(columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join(["%s"] * len(columns))
            cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(rows))


def churn(history: History, epochs: int, every: int = 0, truncate_at: int = -1) -> History:
    """Grow ``history`` to ``epochs`` epochs by splitting and re-merging its upper segment.

    The lower segment of epoch 0 stays open forever. With ``every`` > 0, a retention cut (all
    current segments at offset 10) is recorded at every ``every``-th epoch (0 included); at epoch
    ``truncate_at`` the stream is truncated at the current segments, offset 5.
    """

    def after_epoch() -> None:
        if every and history.epoch % every == 0:
            history.record_cut(history.cut(10))
        if history.epoch == truncate_at:
            history.truncate(history.cut(5))

    after_epoch()
    while history.epoch < epochs - 1:
        upper = history.current[1:]
        if len(upper) == 1:
            history.split(upper[0].id)
        else:
            history.merge(s.id for s in upper)
        after_epoch()
    return history
