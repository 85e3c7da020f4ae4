"""``LocateOffset``: the first event boundary at or after an offset of a segment.

Responsibility: ``EventLocator.locate(segment, target)`` answers where the event that covers or
follows ``target`` ends, so that a caller can cut a stream about N bytes ahead of a stream cut
(the controller's "next stream cut", Spark's ``approx_bytes_per_trigger``) without reading
the events itself. Pravega keeps an index segment for this; Millrace walks the event headers
(8 bytes: type 0, length) from the nearest boundary it knows below the target, reading only
the chunks where headers lie (an event larger than a chunk is stepped over, not read).

Known boundaries: the segment's start offset (truncation happens at stream cuts) and the
answers already given, kept for the most recently asked segments. So a caller that asks for
offsets further and further along one segment walks each byte once; the first question after
a restart walks from the start offset.
"""

from __future__ import annotations

import bisect
import collections

from millrace.kernel.wire.event_frame import EVENT_BYTES_MAX, EVENT_HEADER, EVENT_TYPE
from segment_app.engine.api import SegmentStoreAPI
from segment_app.engine.errors import InvalidArgumentError

__all__ = ["EventLocator"]

#: Bytes read per step of a walk.
WALK_READ_BYTES = 1024 * 1024
_HEADER = EVENT_HEADER.size


class EventLocator:
    def __init__(
        self, store: SegmentStoreAPI, *, segments_max: int = 4096, marks_max: int = 64
    ) -> None:
        self.store = store
        self.segments_max = segments_max
        self.marks_max = marks_max
        #: segment -> sorted boundaries found before (most recently asked segments last)
        self._marks: collections.OrderedDict[str, list[int]] = collections.OrderedDict()

    async def locate(self, segment: str, target: int) -> int:
        """The smallest event boundary >= ``target`` (the segment's length if none is below
        it; its start offset if ``target`` is before that)."""
        info = await self.store.get_info(segment)
        if target >= info.length:
            return info.length
        if target <= info.start_offset:
            return info.start_offset
        marks = self._marks.get(segment, [])
        below = bisect.bisect_right(marks, target)
        if below and marks[below - 1] == target:
            return target
        offset = max(info.start_offset, marks[below - 1] if below else 0)
        offset = await self._walk(segment, offset, target, info.length)
        self._remember(segment, offset)
        return offset

    async def _walk(self, segment: str, offset: int, target: int, length: int) -> int:
        while offset < target:
            result = await self.store.read(segment, offset, WALK_READ_BYTES)
            data = result.data
            if len(data) < _HEADER:
                raise _not_events(segment, offset, "a header cut short by the segment's end")
            at = 0
            while at + _HEADER <= len(data) and offset + at < target:
                kind, size = EVENT_HEADER.unpack_from(data, at)
                if kind != EVENT_TYPE or not 0 <= size <= EVENT_BYTES_MAX:
                    raise _not_events(segment, offset + at, f"type {kind}, length {size}")
                at += _HEADER + size
            offset += at  # past the chunk when an event is larger than what was read
            if offset > length:
                raise _not_events(segment, offset, f"an event running past its length {length}")
        return offset

    def _remember(self, segment: str, offset: int) -> None:
        marks = self._marks.pop(segment, [])
        bisect.insort(marks, offset)
        if len(marks) > self.marks_max:
            del marks[0]
        self._marks[segment] = marks
        while len(self._marks) > self.segments_max:
            self._marks.popitem(last=False)

    def forget(self, segment: str) -> None:
        """Drop what is known of ``segment`` (deleted: a new one may take its name)."""
        self._marks.pop(segment, None)


def _not_events(segment: str, offset: int, what: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"no event header at offset {offset} ({what}): the segment is not written as events",
        segment=segment,
    )
