"""Events as they lie in a segment: an 8-byte header (type 0, length) then the payload.

Pravega's writers frame every event this way (``WireCommands.Event``), so readers can split a
segment's bytes back into events from any event boundary. ``EventSplitter`` does that on the
chunks of consecutive reads: complete events come out with their offsets, a partial one waits
for the next chunk.
"""

from __future__ import annotations

import functools
import itertools
import struct
from typing import Any, NamedTuple

from millrace.kernel.wire.event_frame import EVENT_BYTES_MAX, EVENT_HEADER, EVENT_TYPE

__all__ = [
    "EVENT_BYTES_MAX",
    "EVENT_HEADER",
    "EVENT_TYPE",
    "Event",
    "EventFormatError",
    "EventRead",
    "EventSplitter",
    "encode_event",
]

_HEADER_UNPACK = EVENT_HEADER.unpack_from


class EventFormatError(ValueError):
    """Bytes at an offset that are not an event header (reading from a non-boundary offset,
    or a segment not written as events)."""


def encode_event(payload: bytes) -> bytes:
    """``payload`` with its event header."""
    if len(payload) > EVENT_BYTES_MAX:
        raise ValueError(f"an event holds at most {EVENT_BYTES_MAX} bytes, not {len(payload)}")
    return EVENT_HEADER.pack(EVENT_TYPE, len(payload)) + payload


class Event(NamedTuple):
    """One event read back: where it starts in its segment, and its payload."""

    offset: int
    data: bytes

    @property
    def next_offset(self) -> int:
        return self.offset + EVENT_HEADER.size + len(self.data)


class EventRead(NamedTuple):
    """One event as a reader hands it out: the segment it was read from, its offset there,
    and its bytes. A reader group's reader also hands out checkpoint markers:
    ``is_checkpoint``, no data. (A tuple: cheap to make by the million.)"""

    segment: str
    offset: int
    data: bytes
    checkpoint_name: str | None = None

    @property
    def is_checkpoint(self) -> bool:
        return self.checkpoint_name is not None

    @property
    def next_offset(self) -> int:
        return self.offset + EVENT_HEADER.size + len(self.data)


_new_tuple = tuple.__new__


class EventSplitter:
    """Splits consecutive reads of one segment into events (``Event``; ``EventRead`` of
    ``segment`` when one is given)."""

    def __init__(self, offset: int, segment: str | None = None) -> None:
        #: Offset of the first byte not yet returned as part of an event.
        self.offset = offset
        self.segment = segment
        self._pending = b""

    def feed(self, offset: int, data: bytes) -> list[Any]:
        """The complete events of ``data`` (read at ``offset``) and of what was left before."""
        expected = self.offset + len(self._pending)
        if offset != expected:
            raise EventFormatError(f"read at offset {offset}, expected {expected}")
        buffer = self._pending + data if self._pending else bytes(data)
        events, position = _uniform_run(buffer, self.offset, self.segment)
        position = self._split(buffer, position, events)
        self._pending = buffer[position:] if position < len(buffer) else b""
        self.offset += position
        return events

    def _split(self, buffer: bytes, position: int, events: list[Any]) -> int:
        """Add the events of ``buffer`` from ``position`` one by one; where the next starts."""
        append = events.append
        unpack = _HEADER_UNPACK
        header = EVENT_HEADER.size
        size = len(buffer)
        base = self.offset
        segment = self.segment
        while size - position >= header:
            kind, length = unpack(buffer, position)
            if kind != EVENT_TYPE or not 0 <= length <= EVENT_BYTES_MAX:
                at = base + position
                raise EventFormatError(
                    f"no event header at offset {at} (type {kind}, length {length})"
                )
            start = position + header
            end = start + length
            if end > size:
                break
            if segment is None:
                append(_new_tuple(Event, (base + position, buffer[start:end])))
            else:
                append(_new_tuple(EventRead, (segment, base + position, buffer[start:end], None)))
            position = end
        return position

    @property
    def buffered(self) -> int:
        """Bytes of a partial event kept for the next chunk."""
        return len(self._pending)


#: Events of one size cut by one struct (``_payloads_struct``).
_UNIT_EVENTS = 1024


@functools.lru_cache(maxsize=64)
def _payloads_struct(length: int, count: int) -> struct.Struct:
    """Cuts ``count`` events of ``length`` bytes each (8-byte header skipped) in one C call."""
    return struct.Struct(f">{f'8x{length}s' * count}")


def _uniform_run(buffer: bytes, base: int, segment: str | None) -> tuple[list[Any], int]:
    """The events at the start of ``buffer`` when every whole event there has the first one's
    size (what a producer of one event size writes): checked and cut in C, with no Python
    step per event. ``([], 0)`` when they are not all alike (the caller splits one by one)."""
    header = EVENT_HEADER.size
    if len(buffer) < header:
        return [], 0
    kind, length = _HEADER_UNPACK(buffer, 0)
    stride = header + length
    count = len(buffer) // stride
    if count < 2 or kind != EVENT_TYPE or not 0 <= length <= EVENT_BYTES_MAX:
        return [], 0
    end = count * stride
    first = buffer[:header]
    for j in range(header):  # byte j of every header, in one slice
        if buffer[j:end:stride] != first[j : j + 1] * count:
            return [], 0
    payloads: list[bytes] = []
    for start in range(0, end, stride * _UNIT_EVENTS):  # units of a cached struct
        units = min(_UNIT_EVENTS, (end - start) // stride)
        payloads.extend(_payloads_struct(length, units).unpack_from(buffer, start))
    offsets = range(base, base + end, stride)
    if segment is None:
        pairs = zip(offsets, payloads, strict=True)
        return list(map(_new_tuple, itertools.repeat(Event), pairs)), end
    rows = zip(itertools.repeat(segment), offsets, payloads, itertools.repeat(None))
    return list(map(_new_tuple, itertools.repeat(EventRead), rows)), end
