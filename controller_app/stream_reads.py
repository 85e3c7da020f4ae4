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
from controller_app.errors import InvalidArgumentError, SegmentTruncatedError
from controller_app.models import Stream
from controller_app.ports import SegmentState, SegmentStorePort
from controller_app.segments import Segment
from millrace.client.events import Event, EventSplitter
from millrace.client.streamcut import StreamCut

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


def read_page(store: SegmentStorePort, stream: Stream, cut: Mapping[int, int], limit: int) -> Page:
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
    store: SegmentStorePort, name: str, offset: int, length: int, count: int, budget: int
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


def next_cut(
    store: SegmentStorePort, stream: Stream, cut: Mapping[int, int], approx_bytes: int
) -> tuple[dict[int, int], int]:
    """The stream cut about ``approx_bytes`` after the valid cut ``cut``, and the bytes between
    the two (Pravega's ``getNextStreamCut``).

    The bytes are shared evenly among the segments that have data after the cut (what one
    cannot use goes to the others); each segment's new offset is the first event boundary at
    or after its share (``SegmentStorePort.locate``), so the distance may pass ``approx_bytes`` by
    up to one event per segment. A segment read to its end is followed by its successors as
    in ``read_page``. Never past the tail as of now: with less data than asked, the answer is
    the tail (and ``cut`` itself when there is nothing after it).
    """
    position = dict(cut)
    ended: dict[int, int] = {}
    budget, moved = approx_bytes, 0
    while budget > 0:
        progressed = False
        active: list[tuple[int, str, int, int]] = []
        for segment_id in sorted(position):
            if segment_id in ended:
                continue
            name = sel.segment_name(stream, segment_id)
            state = store.info(name)
            offset = position[segment_id]
            if not state.exists:
                ended[segment_id] = offset
                progressed = True
            elif offset < state.start_offset:  # truncated away: from the head
                position[segment_id] = state.start_offset
                active.append((segment_id, name, state.start_offset, state.length))
            elif offset < state.length:
                active.append((segment_id, name, offset, state.length))
            elif state.sealed:
                ended[segment_id] = offset
                progressed = True
        share = max(budget // max(len(active), 1), 1)
        for segment_id, name, offset, length in active:
            target = offset + share
            if offset < length:
                found = length if target >= length else store.locate(name, target)
                position[segment_id] = found
                budget -= found - offset
                moved += found - offset
                progressed = True
        progressed |= _start_successors(stream, position, ended)
        if not progressed:
            break
    return position, moved


def tail_cut(store: SegmentStorePort, stream: Stream) -> dict[Segment, int]:
    """Where the stream ends now: each segment of its current epoch (of its last epoch once
    sealed) at its length in the segment store, as ``{Segment: offset}``."""
    segments = (
        sel.current_segments(stream)
        or sel.epoch_record(stream, stream.current_epoch).segment_list()
    )
    return {s: store.info(sel.segment_name(stream, s.id)).length for s in segments}


def start_cut(store: SegmentStorePort, stream: Stream, where: str) -> dict[int, int]:
    """Where a read starts, as a stream cut (segment id -> offset): ``head``, ``tail``,
    ``time:<ms>`` (the segments of the epoch current then, from their start) or a stream
    cut's text form. ``InvalidArgumentError`` (or ``InvalidStreamCutError``) otherwise."""
    if where == "head":
        return {s.id: o for s, o in sel.head_segments(stream).items()}
    if where == "tail":
        return {s.id: o for s, o in tail_cut(store, stream).items()}
    if where.startswith("time:"):
        text = where.removeprefix("time:")
        if not text.isascii() or not text.isdigit() or int(text) >= 2**63:
            raise InvalidArgumentError("time must be milliseconds since the Unix epoch")
        return {s.id: o for s, o in sel.segments_at_time(stream, int(text)).items()}
    try:
        cut = StreamCut.from_text(where)
    except ValueError as exc:
        raise InvalidArgumentError(
            f"a read starts at head, tail, time:<ms> or a stream cut ({exc})"
        ) from None
    if (cut.scope, cut.stream) != (stream.scope.name, stream.name):
        raise InvalidArgumentError(f"the stream cut is of {cut.scope}/{cut.stream}")
    return {s.id: o for s, o in sel.validate_stream_cut(stream, cut.positions).items()}


#: Events one search looks at, at most (a console search stops there and says so).
SCAN_EVENTS_MAX = 200_000
#: Events asked for per page while searching.
SCAN_PAGE = 5_000


@dataclass
class Found:
    events: list[tuple[int, Event]]
    #: the stream cut after the last event looked at: where to go on from
    position: dict[int, int]
    scanned: int
    #: the search stopped at the scan budget before the tail
    cut_short: bool


#: The bytes "the newest events" first reads back from each segment's tail (it grows fourfold
#: until enough events are in it).
NEWEST_WINDOW_BYTES = 64 * 1024
#: How many epochs back "the newest events" looks, in turn, for enough of them.
NEWEST_EPOCHS_BACK = (0, 1, 3)


def newest_events(
    store: SegmentStorePort, stream: Stream, limit: int, contains: bytes = b""
) -> Found:
    """The newest ``limit`` events (containing ``contains``) over all the segments of the
    current epoch (and of one, then three epochs back when those hold too few), oldest first.

    Each segment is read back from its tail: a window of ``NEWEST_WINDOW_BYTES`` before its
    end, grown fourfold until it holds ``limit`` matches or reaches the segment's start, all
    within ``SCAN_EVENTS_MAX`` events. The segment store keeps no append time per event, so
    events of different segments are put in order by an estimate: the time of a byte is
    interpolated between the segment's creation and its last append. ``position`` is where
    each segment's tail was."""
    picked: dict[int, tuple[Segment, SegmentState, list[Event]]] = {}
    scanned, cut_short = 0, False
    for back in NEWEST_EPOCHS_BACK:
        epoch = sel.epoch_record(stream, max(stream.current_epoch - back, 0))
        for segment in epoch.segment_list():
            if segment.id in picked:
                continue
            name = sel.segment_name(stream, segment.id)
            state = store.info(name)
            budget = SCAN_EVENTS_MAX - scanned
            events, looked, short = _newest_of(store, name, state, limit, contains, budget)
            picked[segment.id] = (segment, state, events)
            scanned, cut_short = scanned + looked, cut_short or short
            if scanned >= SCAN_EVENTS_MAX:
                break
        found = sum(len(events) for _, _, events in picked.values())
        if found >= limit or epoch.epoch == 0 or scanned >= SCAN_EVENTS_MAX:
            break
    timed = [
        (_appended_at(segment, state, event.offset), segment.id, event)
        for segment, state, events in picked.values()
        for event in events
    ]
    timed.sort(key=lambda item: (item[0], item[1], item[2].offset))
    tails = {segment_id: state.length for segment_id, (_, state, _) in picked.items()}
    return Found([(sid, e) for _, sid, e in timed[-limit:]], tails, scanned, cut_short)


def _appended_at(segment: Segment, state: SegmentState, offset: int) -> float:
    """When the byte at ``offset`` was appended, estimated (ms): between the segment's
    creation and its last change, in proportion to the offset."""
    created = float(segment.creation_time)
    last = float(state.last_modified_ms or created)
    if state.length <= 0 or last <= created:
        return last + offset * 1e-9  # (no span: the offset orders it)
    return created + (last - created) * offset / state.length


def _newest_of(
    store: SegmentStorePort, name: str, state: SegmentState, limit: int, contains: bytes,
    budget: int,
) -> tuple[list[Event], int, bool]:  # fmt: skip
    """The last ``limit`` events of segment ``name`` containing ``contains``, looking at
    ``budget`` events at most; how many it looked at; whether the budget stopped it before the
    segment's start."""
    if not state.exists or state.length <= state.start_offset:
        return [], 0, False
    window, looked = NEWEST_WINDOW_BYTES, 0
    while True:
        start = max(state.start_offset, state.length - window)
        offset = store.locate(name, start) if start > state.start_offset else start
        # (the whole window: its bytes bound the work, and the newest events are at its end)
        events = _read(store, name, offset, state.length, 1 << 62, 1 << 62)
        looked += len(events)
        matching = [e for e in events if contains in e.data]
        if len(matching) >= limit or start == state.start_offset:
            return matching[-limit:], looked, False
        if looked >= budget:
            return matching[-limit:], looked, True
        window *= 4


def find_events(
    store: SegmentStorePort,
    stream: Stream,
    cut: Mapping[int, int],
    *,
    limit: int,
    contains: bytes = b"",
    scan_max: int = SCAN_EVENTS_MAX,
) -> Found:
    """Events from ``cut`` whose bytes contain ``contains``: the first ``limit`` of them (the
    newest ones: ``newest_events``). Looks at ``scan_max`` events at most."""
    kept: list[tuple[int, Event]] = []
    position, scanned = dict(cut), 0
    while scanned < scan_max:
        room = scan_max - scanned
        if not contains:  # a plain read: the page ends where the limit does
            room = min(room, limit - len(kept))
        page = read_page(store, stream, position, min(SCAN_PAGE, room))
        scanned += len(page.events)
        kept.extend(item for item in page.events if contains in item[1].data)
        position = page.position
        if len(kept) >= limit:
            # a search goes on after the events it looked at (later matches of this page too)
            return Found(kept[:limit], position, scanned, cut_short=False)
        if not page.events or page.end_of_stream:
            return Found(kept, position, scanned, cut_short=False)
    return Found(kept, position, scanned, cut_short=True)
