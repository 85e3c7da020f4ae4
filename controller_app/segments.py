"""Pure helpers on segments: ids, qualified names, key ranges and stream-cut algebra.

No database access here (selectors fetch rows, then call these), so every rule is testable on
plain values. Vocabulary (Pravega's):

* segment ids and qualified names: ``millrace.kernel.naming`` (the kernel), imported here;
* key ranges ``[key_start, key_end)`` of one epoch cover ``[0, 1)`` exactly, disjointly; the
  last upper bound is exactly ``1.0`` (clients check it);
* two overlapping segments of a stream are ordered by id: the one created in a later epoch
  replaced (part of) the earlier one's key range, so ids order them in stream time;
* a stream cut maps segments to offsets; as JSON, its keys are segment ids in decimal.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c

from millrace.kernel.naming import (
    segment_id,
    short_segment_name,
)

KEY_SPACE_END = 1.0
_EPSILON = 1e-12


def exact_end(key_end: float) -> float:
    """``key_end`` with floating-point dust at the top of the key space rounded to ``1.0``."""
    return KEY_SPACE_END if key_end >= KEY_SPACE_END - _EPSILON else key_end


def uniform_ranges(count: int, start: float = 0.0, end: float = 1.0) -> list[tuple[float, float]]:
    """``count`` equal ranges splitting ``[start, end)``; the last one ends exactly at ``end``."""
    if count < 1 or not 0.0 <= start < end <= 1.0:
        raise ValueError(f"cannot split [{start}, {end}) in {count}")
    width = end - start
    bounds = [start + width * i / count for i in range(count)] + [end]
    return [(bounds[i], bounds[i + 1]) for i in range(count)]


@dataclass(frozen=True, eq=False, slots=True)
class Segment:
    """One segment of a stream: its number, creation epoch and time, and key range.

    Equal (and hashed) by id, so the same segment read from an epoch record or from its
    segment record is one dictionary key.
    """

    number: int
    creation_epoch: int
    key_start: float
    key_end: float
    creation_time: int = 0

    @property
    def id(self) -> int:
        return segment_id(self.creation_epoch, self.number)

    def overlaps(self, other: Segment) -> bool:
        return self.key_start < other.key_end and other.key_start < self.key_end

    def encode(self) -> list[Any]:
        """The compact JSON form stored in epoch and truncation records."""
        return [self.number, self.creation_epoch, self.key_start, self.key_end, self.creation_time]

    @classmethod
    def decode(cls, data: Sequence[Any]) -> Segment:
        number, epoch, start, end, time = data
        return cls(int(number), int(epoch), float(start), exact_end(float(end)), int(time))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Segment) and self.id == other.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return (
            f"Segment({short_segment_name(self.number, self.creation_epoch)}, "
            f"[{self.key_start}, {self.key_end}))"
        )


def encode_segments(segments: Iterable[Segment]) -> list[list[Any]]:
    """Segments as stored in JSON, sorted by key range."""
    return [s.encode() for s in sorted(segments, key=lambda s: s.key_start)]


def decode_segments(data: Iterable[Sequence[Any]]) -> tuple[Segment, ...]:
    return tuple(Segment.decode(item) for item in data)


def encode_stream_cut(cut: Mapping[int, int]) -> dict[str, int]:
    """A stream cut (segment id → offset) as a JSON object (keys must be strings)."""
    return {str(sid): int(offset) for sid, offset in sorted(cut.items())}


def decode_stream_cut(data: Mapping[str, Any]) -> dict[int, int]:
    return {int(sid): int(offset) for sid, offset in data.items()}


def keyspace_gap(segments: Iterable[Segment]) -> str | None:
    """Why ``segments`` do not cover ``[0, 1)`` exactly and disjointly, or None if they do."""
    ordered = sorted(segments, key=lambda s: (s.key_start, s.key_end))
    position = 0.0
    for seg in ordered:
        if seg.key_start < position - _EPSILON:
            return f"{seg!r} overlaps the segment before it"
        if seg.key_start > position + _EPSILON:
            return f"the key range [{position}, {seg.key_start}) is not covered"
        position = seg.key_end
    if position < KEY_SPACE_END - _EPSILON:
        return f"the key range [{position}, 1.0) is not covered"
    return None


class CutOrder(enum.Enum):
    """How stream cut ``a`` stands to stream cut ``b``."""

    BEFORE = "BEFORE"  # a < b: b is at or after a everywhere, and differs somewhere
    EQUAL = "EQUAL"
    AFTER = "AFTER"  # a > b
    OVERLAPPING = "OVERLAPPING"  # ahead in one key range, behind in another


def _at_or_after(a: Mapping[Segment, int], b: Mapping[Segment, int]) -> bool:
    """Whether cut ``a`` is at or after cut ``b`` in every key range (Pravega's comparison)."""
    for x, x_offset in a.items():
        for y, y_offset in b.items():
            if not x.overlaps(y):
                continue
            if x.id < y.id or (x.id == y.id and x_offset < y_offset):
                return False
    return True


def compare_cuts(a: Mapping[Segment, int], b: Mapping[Segment, int]) -> CutOrder:
    """Order two stream cuts of the same stream, by key ranges, ids and offsets."""
    a_after, b_after = _at_or_after(a, b), _at_or_after(b, a)
    if a_after and b_after:
        return CutOrder.EQUAL
    if a_after:
        return CutOrder.AFTER
    if b_after:
        return CutOrder.BEFORE
    return CutOrder.OVERLAPPING


def overlay(epoch_segments: Iterable[Segment], cut: Mapping[Segment, int]) -> dict[Segment, int]:
    """Segments of an epoch with a truncation cut laid over them: the later one wins.

    Wherever the cut is ahead of the epoch, its segments (at their offsets) replace the
    epoch's; a segment in both keeps the cut's offset; elsewhere epoch segments start at 0.
    """
    result: dict[Segment, int] = {}
    cut_segments = list(cut)
    for seg in epoch_segments:
        later = [c for c in cut_segments if c.overlaps(seg) and c.id >= seg.id]
        if not later:
            result[seg] = 0
        for c in later:
            result[c] = cut[c]
    return result


def between(
    candidates: Iterable[Segment],
    from_cut: Iterable[Segment],
    to_cut: Iterable[Segment],
) -> list[Segment]:
    """The candidates at or after ``from_cut`` and at or before ``to_cut``, sorted by id.

    A segment is in between when every segment of ``from_cut`` overlapping it is not later
    than it and every segment of ``to_cut`` overlapping it is not earlier (PDP-32).
    """
    froms, tos = list(from_cut), list(to_cut)
    chosen = {
        seg
        for seg in candidates
        if all(f.id <= seg.id for f in froms if f.overlaps(seg))
        and all(seg.id <= t.id for t in tos if t.overlaps(seg))
    }
    return sorted(chosen, key=lambda s: s.id)


def successors_with_predecessors(
    segment: Segment, sealing_epoch: Iterable[Segment], previous_epoch: Iterable[Segment]
) -> dict[Segment, list[int]]:
    """Successors of ``segment`` (sealed when ``sealing_epoch`` began), each with the ids of
    its predecessors (the segments of the epoch before it that it replaced)."""
    previous = list(previous_epoch)
    successors = [s for s in sealing_epoch if s.overlaps(segment) and s.id != segment.id]
    return {s: sorted(p.id for p in previous if p.overlaps(s) and p.id != s.id) for s in successors}


def splits_and_merges(previous: Iterable[Segment], current: Iterable[Segment]) -> tuple[int, int]:
    """``(splits, merges)`` of the scale from ``previous`` to ``current`` (REST ScaleMetadata):
    a sealed segment replaced by several is a split; a new one replacing several is a merge."""
    prev, cur = set(previous), set(current)
    sealed, created = prev - cur, cur - prev
    splits = sum(1 for s in sealed if sum(1 for c in created if c.overlaps(s)) > 1)
    merges = sum(1 for c in created if sum(1 for s in sealed if s.overlaps(c)) > 1)
    return splits, merges


def bucket_for(scope: str, stream: str, bucket_count: int) -> int:
    """The stream bucket of ``scope/stream``: a stable hash (CRC32C) modulo the bucket count."""
    if bucket_count < 1:
        raise ValueError("bucket_count must be at least 1")
    return crc32c.crc32c(f"{scope}/{stream}".encode()) % bucket_count
