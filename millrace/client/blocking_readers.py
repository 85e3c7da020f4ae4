"""The blocking readers: events come from the I/O loop in batches, ``read_next`` takes locally.

Responsibility: ``EventReader`` (one reader of a whole stream) and ``GroupReader`` (a reader of a
reader group) are what ``StreamManager`` gives for reading. Each keeps the last batch it got
from the I/O loop (``read_batch`` of the asyncio reader: one thread hop per batch, not per
event); ``read_next`` hands out the next event of it and fetches a new batch only when it is
used up. ``read_batch`` gives the caller what is left of the local batch, or a fresh one.

``read_next(timeout)`` returns ``None`` when nothing arrives within ``timeout`` seconds, and
also at the end of a sealed stream; ``finished`` tells the two apart, and iterating
(``for event in reader``) goes on through quiet periods and stops at the end. A group reader
counts the events of a batch as handed to the application (its position moves past them) only
when it asks for the next batch, or for those it handed out when it closes: a reader that dies
leaves the rest of its batch to be read again (at-least-once, as before).

Both are context managers; one left open at interpreter exit is closed quietly (a group reader
then leaves its group at the events it handed out).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from millrace.client.events import EventRead
from millrace.client.reader import AsyncEventReader
from millrace.client.reader_group import AsyncGroupReader, SegmentSlice, TimeWindow
from millrace.client.transport.io_loop import IoLoop
from millrace.kernel.naming import parse_segment_name

__all__ = ["BATCH_EVENTS", "EventReader", "GroupReader"]

#: Events fetched from the I/O loop at once by ``read_next``.
BATCH_EVENTS = 4096


class _AsyncReader(Protocol):
    @property
    def finished(self) -> bool: ...

    async def read_batch(
        self, max_events: int = ..., timeout: float | None = ...
    ) -> list[EventRead]: ...


class _BatchReader:
    """What both readers share: the local batch and its use."""

    def __init__(self, io: IoLoop, reader: _AsyncReader, batch_events: int) -> None:
        if batch_events < 1:
            raise ValueError(f"batch_events must be at least 1, not {batch_events}")
        self._io, self._async, self.batch_events = io, reader, batch_events
        self._batch: list[EventRead] = []
        self._index = 0
        self._closed = False

    @property
    def finished(self) -> bool:
        """The end was reached: every stream read is sealed and was read to its end."""
        return self._index >= len(self._batch) and self._async.finished

    def read_next(self, timeout: float | None = None) -> EventRead | None:
        """The next event (or checkpoint marker); ``None`` if none comes within ``timeout``
        seconds, or at the end (``finished``)."""
        index = self._index
        batch = self._batch
        if index < len(batch):
            self._index = index + 1
            return batch[index]
        batch = self._fetch(self.batch_events, timeout)
        if not batch:
            return None
        self._index = 1
        return batch[0]

    def read_batch(
        self, max_events: int = BATCH_EVENTS, timeout: float | None = None
    ) -> list[EventRead]:
        """Up to ``max_events`` events: what is left of the local batch, else a new batch
        (waiting up to ``timeout`` s for its first event); empty if none came in time or at
        the end (``finished``)."""
        if max_events < 1:
            raise ValueError(f"max_events must be at least 1, not {max_events}")
        index, batch = self._index, self._batch
        if index < len(batch):
            taken = batch[index : index + max_events]
            self._index = index + len(taken)
            return taken
        fetched = self._fetch(max_events, timeout)
        self._index = len(fetched)
        return fetched

    def _fetch(self, count: int, timeout: float | None) -> list[EventRead]:
        if self._closed:
            raise ValueError("the reader is closed")
        self._batch = self._io.run(self._async.read_batch(count, timeout))
        self._index = 0
        return self._batch

    def __iter__(self) -> Iterator[EventRead]:
        while True:
            event = self.read_next()
            if event is None:
                if self.finished:
                    return
                continue
            yield event


class EventReader(_BatchReader):
    """Blocking reader of a whole stream (``StreamManager.create_reader``)."""

    def __init__(
        self, io: IoLoop, reader: AsyncEventReader, batch_events: int = BATCH_EVENTS
    ) -> None:
        super().__init__(io, reader, batch_events)
        self._reader = reader
        io.on_exit(self, reader.close)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._io.forget(self)
        self._io.run(self._reader.close())

    def __enter__(self) -> EventReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class GroupReader(_BatchReader):
    """Blocking reader of a reader group (``ReaderGroup.create_reader``). A checkpoint marker
    that becomes due while events of the local batch wait comes before them (the events
    handed out so far are in the checkpoint; the rest come after the marker)."""

    def __init__(
        self, io: IoLoop, reader: AsyncGroupReader, batch_events: int = BATCH_EVENTS
    ) -> None:
        super().__init__(io, reader, batch_events)
        self._reader = reader
        self.reader_id = reader.reader_id
        #: Events of the local batch whose positions already count (``checkpoint_now``).
        self._counted = 0
        io.on_exit(self, self._close_at_exit)

    def read_next(self, timeout: float | None = None) -> EventRead | None:
        if self._reader.checkpoint_pending and self._index < len(self._batch):
            marker = self._checkpoint_now()
            if marker is not None:
                return marker
        return super().read_next(timeout)

    def read_batch(
        self, max_events: int = BATCH_EVENTS, timeout: float | None = None
    ) -> list[EventRead]:
        if self._reader.checkpoint_pending and self._index < len(self._batch):
            marker = self._checkpoint_now()
            if marker is not None:
                return [marker]
        return super().read_batch(max_events, timeout)

    def current_time_window(self, stream: str) -> TimeWindow:
        """Where this reader stands in event time on ``stream`` ("scope/name"), by the
        stream's newest watermark and the events handed out so far (Pravega's
        ``getCurrentTimeWindow``)."""
        position = self._reader.position(stream)
        waiting: set[str] = set()
        for event in self._batch[self._index :]:  # taken, not handed out yet
            if event.checkpoint_name is None and event.segment not in waiting:
                waiting.add(event.segment)
                scope, name, segment_id = parse_segment_name(event.segment)
                if f"{scope}/{name}" == stream:
                    position[segment_id] = event.offset
        return self._io.run(self._reader.current_time_window(stream, position))

    def _checkpoint_now(self) -> EventRead | None:
        marker = self._io.run(self._reader.checkpoint_now(self._index - self._counted))
        self._counted = self._index
        return marker

    def _fetch(self, count: int, timeout: float | None) -> list[EventRead]:
        self._counted = 0
        return super()._fetch(count, timeout)

    async def _close_at_exit(self) -> None:
        await self._reader.close(self._index - self._counted)

    def get_segment_slice(
        self, max_events: int = BATCH_EVENTS, timeout: float | None = None
    ) -> SegmentSlice | None:
        """Events of one segment (as the official Python client's segment slice); ``None``
        if none came within ``timeout`` s, or at the end (``finished``). Iterate it, then
        ``release_segment`` it: the events not iterated are read again."""
        if self._index < len(self._batch):
            raise ValueError("hand out the events of read_next/read_batch before taking a slice")
        if self._closed:
            raise ValueError("the reader is closed")
        self._batch, self._index, self._counted = [], 0, 0
        return self._io.run(self._reader.read_slice(max_events, timeout))

    def release_segment(self, piece: SegmentSlice) -> None:
        """Done with ``piece``: its iterated events count as handed out."""
        self._io.run(_release(self._reader, piece))

    def close(self) -> None:
        """Leave the group: its segments go back at the events handed out."""
        if self._closed:
            return
        self._closed = True
        self._io.forget(self)
        self._io.run(self._reader.close(self._index - self._counted))

    def __enter__(self) -> GroupReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _release(reader: AsyncGroupReader, piece: SegmentSlice) -> None:
    reader.release_segment(piece)
