"""Reading a stream in pages for HTTP clients: from a stream cut, up to a limit, with the cut
after the page as the continuation.

``read_page(stream, cut, limit)`` reads the segments of ``cut`` from their offsets. A segment
read to its end (sealed) stays in the position at its end offset until its successors start;
a successor starts once every predecessor in the position has ended (predecessors not in the
position were read before it), so per routing key, pages give events in the order written,
across scaling. The position after the page is again a stream cut (every key range is covered
once), so a continuation is an ordinary stream cut text that a reader can start from too.

Nothing here waits for new data: at the tail a page is short (or empty) and the continuation
is where to ask again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller_app import selectors as sel
from controller_app.errors import SegmentTruncatedError
from controller_app.models import Stream
from controller_app.ports import SegmentStore
from controller_app.segments import Segment
from millrace.client.events import Event, EventSplitter

#: Bytes one page holds at most (events beyond are left for the next page).
PAGE_BYTES_MAX = 8 * 1024 * 1024
#: Bytes asked of the segment store per read.
READ_CHUNK_BYTES = 1024 * 1024


@dataclass
class Page:
    events: list[tuple[int, Event]] = field(default_factory=list)  # (segment id, event)
    #: segment id -> offset after the page
    position: dict[int, int] = field(default_factory=dict)
    #: segments whose data at the asked offset had been truncated away (skipped to the head)
    truncated: list[int] = field(default_factory=list)
    #: every segment ended and none follows: the stream is sealed and read to its end
    end_of_stream: bool = False


def read_page(store: SegmentStore, stream: Stream, cut: Mapping[int, int], limit: int) -> Page:
    """Up to ``limit`` events of ``stream`` from the valid stream cut ``cut``."""
    page = Page(position=dict(cut))
    ended: dict[int, int] = {}
    size = 0
    while True:
        progressed = False
        for segment_id in sorted(page.position):
            if segment_id in ended:
                continue
            room = limit - len(page.events)
            if room <= 0 or size >= PAGE_BYTES_MAX:
                break
            name = sel.segment_name(stream, segment_id)
            state = store.info(name)
            offset = page.position[segment_id]
            if not state.exists:  # deleted (truncated away): nothing more in it
                ended[segment_id] = offset
                progressed = True
                continue
            if offset < state.start_offset:
                offset = page.position[segment_id] = state.start_offset
                page.truncated.append(segment_id)
            if offset < state.length:
                events = _read(store, name, offset, state.length, room, PAGE_BYTES_MAX - size)
                for event in events:
                    page.events.append((segment_id, event))
                    size += len(event.data)
                if events:
                    page.position[segment_id] = events[-1].next_offset
                    progressed = True
            if state.sealed and page.position[segment_id] >= state.length:
                ended[segment_id] = page.position[segment_id]
                progressed = True
        progressed |= _start_successors(stream, page.position, ended)
        if not progressed or len(page.events) >= limit or size >= PAGE_BYTES_MAX:
            break
    page.end_of_stream = (
        bool(ended)
        and set(ended) == set(page.position)
        and not any(sel.successors(stream, s) for s in ended)
    )
    return page


def _read(
    store: SegmentStore, name: str, offset: int, length: int, count: int, budget: int
) -> list[Event]:
    """Up to ``count`` whole events (about ``budget`` bytes) of ``name`` from ``offset``,
    which is below the segment's ``length`` (so no read waits at the tail)."""
    splitter = EventSplitter(offset)
    events: list[Event] = []
    at = offset
    while at < length and len(events) < count and budget > 0:
        try:
            chunk = store.read(name, at, min(READ_CHUNK_BYTES, length - at))
        except SegmentTruncatedError:
            break  # truncated meanwhile: the next page starts at the new head

        if not chunk:
            break
        got = splitter.feed(at, chunk)
        at += len(chunk)
        for event in got:
            if len(events) >= count:
                break
            events.append(event)
            budget -= len(event.data)
    return events


def _start_successors(stream: Stream, position: dict[int, int], ended: dict[int, int]) -> bool:
    """Replace ended segments by their successors where every predecessor in the position has
    ended; True if the position changed."""
    changed = False
    for segment_id in sorted(ended):
        if segment_id not in position:
            continue
        found = sel.successors(stream, segment_id)
        waiting = False
        for successor, predecessors in found.items():
            if successor.id in position:
                continue
            if all(p in ended or p not in position for p in predecessors):
                position[successor.id] = 0
                changed = True
            else:
                waiting = True
        if found and not waiting:
            del position[segment_id]
            ended.pop(segment_id)
            changed = True
    return changed


def tail_cut(store: SegmentStore, stream: Stream) -> dict[Segment, int]:
    """Where the stream ends now: each segment of its current epoch (of its last epoch once
    sealed) at its length in the segment store, as ``{Segment: offset}``."""
    segments = (
        sel.current_segments(stream)
        or sel.epoch_record(stream, stream.current_epoch).segment_list()
    )
    return {s: store.info(sel.segment_name(stream, s.id)).length for s in segments}
