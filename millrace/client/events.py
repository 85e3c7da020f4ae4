"""Events as they lie in a segment: an 8-byte header (type 0, length) then the payload.

Pravega's writers frame every event this way (``WireCommands.Event``), so readers can split a
segment's bytes back into events from any event boundary. ``EventSplitter`` does that on the
chunks of consecutive reads: complete events come out with their offsets, a partial one waits
for the next chunk.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

EVENT_HEADER = struct.Struct(">ii")
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


@dataclass(frozen=True, slots=True)
class Event:
    """One event read back: where it starts in its segment, and its payload."""

    offset: int
    data: bytes

    @property
    def next_offset(self) -> int:
        return self.offset + EVENT_HEADER.size + len(self.data)


class EventSplitter:
    """Splits consecutive reads of one segment into events."""

    def __init__(self, offset: int) -> None:
        #: Offset of the first byte not yet returned as part of an event.
        self.offset = offset
        self._pending = bytearray()

    def feed(self, offset: int, data: bytes) -> list[Event]:
        """The complete events of ``data`` (read at ``offset``) and of what was left before."""
        expected = self.offset + len(self._pending)
        if offset != expected:
            raise EventFormatError(f"read at offset {offset}, expected {expected}")
        self._pending += data
        events: list[Event] = []
        view = memoryview(self._pending)
        position = 0
        while len(view) - position >= EVENT_HEADER.size:
            kind, length = EVENT_HEADER.unpack_from(view, position)
            if kind != EVENT_TYPE or not 0 <= length <= EVENT_BYTES_MAX:
                at = self.offset + position
                raise EventFormatError(
                    f"no event header at offset {at} (type {kind}, length {length})"
                )
            end = position + EVENT_HEADER.size + length
            if end > len(view):
                break
            events.append(
                Event(self.offset + position, bytes(view[position + EVENT_HEADER.size : end]))
            )
            position = end
        view.release()
        del self._pending[:position]
        self.offset += position
        return events

    @property
    def buffered(self) -> int:
        """Bytes of a partial event kept for the next chunk."""
        return len(self._pending)
