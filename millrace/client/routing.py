"""Routing keys to points of the key space [0, 1), and points to a stream's segments.

All events of one routing key go to the segment whose key range holds the key's point, so
their order holds. The point is Pravega's, bit for bit, so that a key lands in the same segment
whichever client wrote it: MurmurHash3 x64 128-bit, seeded with Java's
``"EventRouter".hashCode()``, of the key as UTF-16LE (Java's ``hashUnencodedChars``), whose
first 64-bit half has its top 52 bits read as a binary fraction; the segment is the first whose
key range ends at or above the point (Java's ``ceilingEntry`` on the upper bounds). The
``pravega`` wheel (Pravega's Rust client) pads the UTF-16 units with zeros up to the key's UTF-8
length; that changes nothing for ASCII keys, and we follow the wheel for the others
(docs/decisions/0012-routing-keys-as-pravega-clients-do.md). Events without a key get a random
point.
"""

from __future__ import annotations

import bisect
import dataclasses
import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import mmh3

#: Java's ``"EventRouter".hashCode()``.
SEED = 1741865571
_FRACTION_BITS = 52


#: Points of recently used keys (producers reuse keys); cleared when it reaches this size.
_CACHE_MAX = 65_536
_cache: dict[str, float] = {}


def key_point(routing_key: str | None, rng: random.Random | None = None) -> float:
    """The point of ``routing_key`` in [0, 1) (a random one for ``None``)."""
    if routing_key is None:
        return (rng or random).random()
    point = _cache.get(routing_key)
    if point is None:
        units = routing_key.encode("utf-16-le", "surrogatepass")
        padding = 2 * len(routing_key.encode("utf-8", "surrogatepass")) - len(units)
        digest = mmh3.hash_bytes(units + bytes(padding), SEED, x64arch=True)
        point = (struct.unpack_from("<Q", digest)[0] >> 12) / float(1 << _FRACTION_BITS)
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[routing_key] = point
    return point


@dataclass(frozen=True)
class SegmentWithRange:
    """A segment of the current epoch and its key range, as the writer sees it (Pravega's
    ``SegmentWithRange``; a byte range of a segment is ``batch.SegmentRange``)."""

    segment_id: int
    name: str
    key_start: float
    key_end: float


class KeySpace:
    """The segments of one epoch by key range; finds the one owning a point."""

    def __init__(self, segments: Sequence[SegmentWithRange]) -> None:
        self.segments = sorted(segments, key=lambda s: s.key_start)
        self._ends = [s.key_end for s in self.segments]
        if not self.segments:
            raise ValueError("a key space needs at least one segment")

    def segment_for(self, point: float) -> SegmentWithRange:
        """The first segment whose range ends at or above ``point`` (a point on a boundary
        goes to the lower segment, as in Pravega's clients)."""
        index = bisect.bisect_left(self._ends, point)
        return self.segments[min(index, len(self.segments) - 1)]


def replace_sealed(
    keyspace: KeySpace, sealed: SegmentWithRange, successors: Sequence[SegmentWithRange]
) -> KeySpace:
    """``keyspace`` with the sealed segment's key range handed to its successors, each clipped
    to that range. A successor of a merge also covers its other predecessors' ranges; those
    stay with the predecessors until they are found sealed too, so a key's later events
    cannot reach the successor before its earlier ones, still pending on a predecessor, are
    sent again there (Pravega's writer replaces only the sealed segment's range likewise)."""
    # The sealed segment may hold several ranges here (it took over two predecessors' ranges
    # one at a time): its successors take every one of them.
    held = [s for s in keyspace.segments if s.segment_id == sealed.segment_id] or [sealed]
    kept = [s for s in keyspace.segments if s.segment_id != sealed.segment_id]
    clipped = [
        dataclasses.replace(
            s, key_start=max(s.key_start, part.key_start), key_end=min(s.key_end, part.key_end)
        )
        for part in held
        for s in successors
        if s.key_start < part.key_end and s.key_end > part.key_start
    ]
    return KeySpace(kept + clipped)
