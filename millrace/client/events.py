"""Events as they lie in a segment: an 8-byte header (type 0, length) then the payload.

Pravega's writers frame every event this way (``WireCommands.Event``), so readers can split a
segment's bytes back into events from any event boundary. ``EventSplitter`` does that on the
chunks of consecutive reads: complete events come out with their offsets, a partial one waits
for the next chunk.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

EVENT_HEADER = struct.Struct(">ii")
_HEADER_UNPACK = EVENT_HEADER.unpack_from
EVENT_TYPE = 0
#: Pravega's largest event.
EVENT_BYTES_MAX = 8 * 1024 * 1024


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
        events: list[Any] = []
        append = events.append
        unpack = _HEADER_UNPACK
        header = EVENT_HEADER.size
        size = len(buffer)
        base = self.offset
        segment = self.segment
        position = 0
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
        self._pending = buffer[position:] if position < size else b""
        self.offset = base + position
        return events

    @property
    def buffered(self) -> int:
        """Bytes of a partial event kept for the next chunk."""
        return len(self._pending)
