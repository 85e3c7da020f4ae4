"""Reads of controller metadata: segments at the head, tail, a time; successors; stream cuts.

Nothing here writes. Every function runs a fixed number of queries, each an index lookup or
an index range, so its cost does not grow with the length of a stream's history; the
docstrings say how many queries and rows (docs/components/controller-metadata.md has the
table). Functions take a ``Stream`` read with ``get_stream`` (scope joined).

Stream cuts come in as ``{segment id: offset}`` and segments go out as
``controller_app.segments.Segment`` (hashable by id); "a cut" going out is
``{Segment: offset}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from controller_app.choices import NodeRole, SessionState, StreamState, TxnState
from controller_app.errors import (
    InvalidStreamCutError,
    NoNodeForSegmentError,
    SegmentNotFoundError,
)
from controller_app.models import (
    AuditEntry,
    CanaryProbe,
    CompletedTransaction,
    Container,
    ContainerAssignment,
    Epoch,
    KeyValueTable,
    Node,
    ReaderGroup,
    Scope,
    SegmentRecord,
    Stream,
    StreamCutRecord,
    StreamTag,
    TaskCount,
    Transaction,
    TruncationRecord,
)
from controller_app.segments import (
    CutOrder,
    Segment,
    between,
    compare_cuts,
    keyspace_gap,
    overlay,
    splits_and_merges,
    successors_with_predecessors,
)
from millrace.kernel.naming import (
    container_for,
    qualified_segment_name,
    segment_epoch,
    segment_number,
)

StreamCut = Mapping[int, int]  # segment id -> offset

#: Retention records examined when looking for one at or before a cut (newest first).
REFERENCE_CANDIDATES_MAX = 8
#: Scaling events returned by one call, at most.
SCALING_EVENTS_MAX = 1000
#: The offset that stands for "the end" of a segment that is still open.
TAIL_OFFSET = 2**63 - 1


# --- streams --------------------------------------------------------------------------------


def get_stream(scope: str, name: str) -> Stream:
    """The stream ``scope/name`` with its scope (1 query, 1 row). Raises Stream.DoesNotExist."""
    return Stream.objects.select_related("scope").get(scope__name=scope, name=name)


def stream_tags(stream: Stream) -> list[str]:
    """The stream's tags, sorted (1 query, one row per tag)."""
    return sorted(StreamTag.objects.filter(stream=stream).values_list("tag", flat=True))


def streams_with_tag(scope: Scope, tag: str, after: int = 0, limit: int = 100) -> list[Stream]:
    """Streams of ``scope`` tagged ``tag``, by id, from id ``after`` (1 query, ``limit`` rows)."""
    ids = StreamTag.objects.filter(scope=scope, tag=tag, stream_id__gt=after).order_by("stream_id")
    return list(
        Stream.objects.select_related("scope")
        .filter(pk__in=Subquery(ids.values("stream_id")[:limit]))
        .order_by("pk")
    )


# --- epochs and segments ----------------------------------------------------------------------


def epoch_record(stream: Stream, epoch: int) -> Epoch:
    """Epoch ``epoch`` (1 query, 1 row). Raises Epoch.DoesNotExist."""
    return Epoch.objects.get(stream=stream, epoch=epoch)


def current_epoch(stream: Stream) -> Epoch:
    """The tail epoch as stored now, whatever ``stream`` was read with (1 query, 1 row)."""
    return Epoch.objects.annotate(stream_state=F("stream__state")).get(
        stream=stream, epoch=F("stream__current_epoch")
    )


def current_segments(stream: Stream) -> tuple[Segment, ...]:
    """The segments writers append to, by key range; none once sealed (1 query, 1 row)."""
    tail = current_epoch(stream)
    if tail.stream_state in (StreamState.SEALED, StreamState.DELETING):  # type: ignore[attr-defined]
        return ()
    return tail.segment_list()


def latest_truncation(stream: Stream) -> TruncationRecord | None:
    """The current truncation record, if the stream was ever truncated (1 query, 1 row)."""
    return TruncationRecord.objects.filter(stream=stream).order_by("-number").first()


def head_segments(stream: Stream) -> dict[Segment, int]:
    """Where readers start: the latest truncation cut, else epoch 0 at offset 0.

    1 query and 1 row when the stream was truncated, else 2 queries and 2 rows.
    """
    truncation = latest_truncation(stream)
    if truncation is not None:
        return truncation.cut()
    return dict.fromkeys(epoch_record(stream, 0).segment_list(), 0)


def epoch_at_time(stream: Stream, timestamp: int) -> Epoch:
    """The epoch current at ``timestamp`` (ms), epoch 0 before the stream existed.

    1 query: a backward step on the ``(stream, creation_time, epoch)`` time index (the binary
    search of PDP-32's history index) nested in a lookup by ``(stream, epoch)``; 2 rows.
    """
    at_time = (
        Epoch.objects.filter(
            stream=stream, creation_time__lte=timestamp, epoch__lte=F("stream__current_epoch")
        )
        .order_by("-creation_time", "-epoch")
        .values("epoch")[:1]
    )
    return Epoch.objects.get(stream=stream, epoch=Coalesce(Subquery(at_time), 0))


def segments_at_time(stream: Stream, timestamp: int) -> dict[Segment, int]:
    """Segments and start offsets at ``timestamp``: that epoch with the truncation laid over.

    Before the head (or ``timestamp`` 0) this is the head. 2 queries, 3 rows.
    """
    epoch = epoch_at_time(stream, timestamp)
    truncation = latest_truncation(stream)
    cut = truncation.cut() if truncation is not None else {}
    return overlay(epoch.segment_list(), cut)


def segment_record(stream: Stream, segment_id: int) -> SegmentRecord:
    """The record of one segment (1 query, 1 row). Raises SegmentNotFoundError."""
    record = SegmentRecord.objects.filter(
        stream=stream, creation_epoch=segment_epoch(segment_id), number=segment_number(segment_id)
    ).first()
    if record is None:
        raise SegmentNotFoundError(f"stream {stream} has no segment {segment_id}")
    return record


def successors(stream: Stream, segment_id: int) -> dict[Segment, list[int]]:
    """The segments that replaced ``segment_id``, each with its predecessors' ids.

    Empty while the segment is open, and for segments sealed with the stream. The segment's
    record gives its sealing epoch; that epoch and the one before it give the answer.
    2 queries, 3 rows.
    """
    record = segment_record(stream, segment_id)
    sealed_in = record.sealing_epoch
    if sealed_in is None:
        return {}
    epochs = {
        e.epoch: e.segment_list()
        for e in Epoch.objects.filter(stream=stream, epoch__in=[sealed_in - 1, sealed_in])
    }
    return successors_with_predecessors(
        record.as_segment(), epochs[sealed_in], epochs[sealed_in - 1]
    )


def predecessors(stream: Stream, segment_id: int) -> list[Segment]:
    """The segments that ``segment_id`` replaced (none for epoch 0's), by id.

    1 query: its creation epoch and the one before, 2 rows.
    """
    created = segment_epoch(segment_id)
    epochs = {
        e.epoch: e.segment_list()
        for e in Epoch.objects.filter(stream=stream, epoch__in=[created - 1, created])
    }
    own = [s for s in epochs.get(created, ()) if s.id == segment_id]
    if not own:
        raise SegmentNotFoundError(f"stream {stream} has no segment {segment_id}")
    replaced = [p for p in epochs.get(created - 1, ()) if p.overlaps(own[0])]
    return sorted(replaced, key=lambda s: s.id)


def segment_name(stream: Stream, segment_id: int) -> str:
    """The qualified name ``scope/stream/<number>.#epoch.<epoch>`` (no query)."""
    return qualified_segment_name(stream.scope.name, stream.name, segment_id)


# --- stream cuts ----------------------------------------------------------------------------


def _by_ids(stream: Stream, ids: Iterable[int]) -> QuerySet[SegmentRecord]:
    """Segment records of ``stream`` whose id may be in ``ids``: ``creation_epoch IN (...)
    AND number IN (...)``, point lookups in ``segment_record_unique`` (a few extra rows, rolled
    duplicates, may match; callers keep the ones they asked for)."""
    wanted = set(ids)
    return SegmentRecord.objects.filter(
        stream=stream,
        creation_epoch__in=sorted({segment_epoch(sid) for sid in wanted}),
        number__in=sorted({segment_number(sid) for sid in wanted}),
    )


def _records(stream: Stream, ids: Iterable[int]) -> dict[int, SegmentRecord]:
    """Segment records by id (1 query, about one row per id; no query for no id)."""
    wanted = set(ids)
    if not wanted:
        return {}
    rows = (r for r in _by_ids(stream, wanted) if r.segment_id in wanted)
    return {r.segment_id: r for r in rows}


def _positions(
    stream: Stream, cut: StreamCut, records: Mapping[int, SegmentRecord]
) -> dict[Segment, int]:
    """``cut`` as ``{Segment: offset}``, each segment one of the stream's and each offset
    inside it (InvalidStreamCutError otherwise)."""
    missing = sorted(set(cut) - set(records))
    if missing:
        raise InvalidStreamCutError(f"stream {stream} has no segment {missing[0]}")
    segments: dict[Segment, int] = {}
    for sid, offset in cut.items():
        record = records[sid]
        if offset < 0 or (record.sealed_size is not None and offset > record.sealed_size):
            raise InvalidStreamCutError(
                f"offset {offset} is outside segment {record} of {stream}"
                f" (sealed at {record.sealed_size})"
            )
        segments[record.as_segment()] = offset
    return segments


def _cut_segments(
    stream: Stream, cut: StreamCut, records: Mapping[int, SegmentRecord]
) -> dict[Segment, int]:
    """``cut`` as ``{Segment: offset}``, checked to be a consistent position of the stream."""
    if not cut:
        raise InvalidStreamCutError(f"an empty stream cut is not a position of {stream}")
    segments = _positions(stream, cut, records)
    gap = keyspace_gap(segments)
    if gap is not None:
        raise InvalidStreamCutError(f"not a stream cut of {stream}: {gap}")
    return segments


def validate_stream_cut(stream: Stream, cut: StreamCut) -> dict[Segment, int]:
    """``cut`` as ``{Segment: offset}`` if it is a valid position, else InvalidStreamCutError.

    Valid: its segments exist, offsets lie within them, key ranges cover [0, 1) exactly.
    1 query, one row per segment of the cut.
    """
    return _cut_segments(stream, cut, _records(stream, cut))


def validate_reading_position(stream: Stream, position: StreamCut) -> dict[Segment, int]:
    """A follower's position (``{segment id: offset}``) as ``{Segment: offset}``: the segments
    it was still reading when it stopped. Unlike a stream cut it need not cover the key space
    (segments read to their end are left out; their successors follow them), and it may be
    empty (everything was read). Its segments must exist with offsets inside them, else
    InvalidStreamCutError. 1 query, one row per segment."""
    return _positions(stream, position, _records(stream, position))


def is_stream_cut_valid(stream: Stream, cut: StreamCut) -> bool:
    """Whether ``cut`` is a valid position of the stream (as ``validate_stream_cut``)."""
    try:
        validate_stream_cut(stream, cut)
    except InvalidStreamCutError:
        return False
    return True


def compare_stream_cuts(stream: Stream, a: StreamCut, b: StreamCut) -> CutOrder:
    """Whether cut ``a`` is BEFORE, EQUAL to, AFTER or OVERLAPPING cut ``b``.

    1 query, one row per segment of the two cuts. Raises InvalidStreamCutError.
    """
    records = _records(stream, set(a) | set(b))
    return compare_cuts(_cut_segments(stream, a, records), _cut_segments(stream, b, records))


def _span_low(records: Iterable[SegmentRecord]) -> int:
    """The lowest epoch of a cut's span: each segment's latest epoch not after the cut's
    newest creation epoch (PDP-32's stream-cut span), minimised over the cut."""
    rows = list(records)
    high = max(r.creation_epoch for r in rows)
    return min(high if r.sealing_epoch is None else min(high, r.sealing_epoch - 1) for r in rows)


def _records_between(
    stream: Stream,
    start: Mapping[Segment, int],
    end: Mapping[Segment, int],
    records: Mapping[int, SegmentRecord],
) -> list[SegmentRecord]:
    """Records of the segments from cut ``start`` to cut ``end``, both included.

    Candidates are the segments alive in the epochs the two cuts span: those of the span's
    first epoch (1 row) and those created after it up to ``end``'s newest creation epoch
    (one index range of ``segment_record_unique``). 2 queries.
    """
    if compare_cuts(start, end) not in (CutOrder.BEFORE, CutOrder.EQUAL):
        raise InvalidStreamCutError(f"the first cut of {stream} is not at or before the second")
    low = _span_low(records[s.id] for s in start)
    high = max(s.creation_epoch for s in end)
    alive = Epoch.objects.filter(stream=stream, epoch=low).values_list("segments", flat=True)
    alive_ids = {Segment.decode(item).id for item in alive.get()}
    created = SegmentRecord.objects.filter(
        stream=stream, creation_epoch__gt=low, creation_epoch__lte=high
    )
    by_id = {r.segment_id: r for r in created.union(_by_ids(stream, alive_ids), all=True)}
    by_id = {sid: r for sid, r in by_id.items() if sid in alive_ids or r.creation_epoch > low}
    chosen = between((r.as_segment() for r in by_id.values()), start, end)
    return [by_id[s.id] for s in chosen]


def segments_between(
    stream: Stream, from_cut: StreamCut | None = None, to_cut: StreamCut | None = None
) -> list[Segment]:
    """Segments from ``from_cut`` (default: the head) to ``to_cut`` (default: the tail), by id.

    Queries: head (1 or 2) and tail (1) when not given, the cuts' records (1), the candidates
    (2). Rows: the cuts' segments, one epoch, and the segments created in the epochs between.
    """
    start = dict(from_cut) if from_cut is not None else _ids(head_segments(stream))
    end_ids = list(to_cut) if to_cut is not None else _tail_ids(stream)
    records = _records(stream, set(start) | set(end_ids))
    if to_cut is not None:
        end = dict(to_cut)
    else:  # the tail: the end of every segment of the current epoch
        end = {sid: _end_offset(records.get(sid)) for sid in end_ids}
    start_cut = _cut_segments(stream, start, records)
    end_cut = _cut_segments(stream, end, records)
    return [r.as_segment() for r in _records_between(stream, start_cut, end_cut, records)]


def _ids(cut: Mapping[Segment, int]) -> dict[int, int]:
    return {s.id: offset for s, offset in cut.items()}


def _tail_ids(stream: Stream) -> list[int]:
    return [s.id for s in current_epoch(stream).segment_list()]


def _end_offset(record: SegmentRecord | None) -> int:
    """A segment's last offset: its size at sealing, or "beyond anything" while it is open."""
    if record is None or record.sealed_size is None:
        return TAIL_OFFSET
    return record.sealed_size


def _reference(
    stream: Stream, cut: Mapping[Segment, int], records: Mapping[int, SegmentRecord]
) -> tuple[StreamCutRecord | None, dict[Segment, int], dict[int, SegmentRecord]]:
    """The newest retention record at or before ``cut``, its cut and segment records.

    A record whose segments were all created no later than the first epoch of ``cut``'s span
    is at or before it in every key range; the newest few such records are checked for
    offsets too. Without one, the start of the stream (epoch 0 at offset 0) is the reference.
    2 queries; rows: a few records and their segments.
    """
    span_low = _span_low(records[s.id] for s in cut)
    candidates = list(
        StreamCutRecord.objects.filter(stream=stream, span_high_epoch__lte=span_low).order_by(
            "-span_high_epoch", "-recording_time"
        )[:REFERENCE_CANDIDATES_MAX]
    )
    if candidates:
        found = _records(stream, {sid for c in candidates for sid in c.cut_ids()})
        for candidate in candidates:
            ids = candidate.cut_ids()
            if not set(ids) <= set(found):
                continue
            start = {found[sid].as_segment(): offset for sid, offset in ids.items()}
            if compare_cuts(start, cut) in (CutOrder.BEFORE, CutOrder.EQUAL):
                return candidate, start, found
    first = dict.fromkeys(epoch_record(stream, 0).segment_list(), 0)
    return None, first, _records(stream, _ids(first))


def size_till_stream_cut(stream: Stream, cut: StreamCut) -> int:
    """Bytes written to the stream from its very start up to ``cut``.

    The newest retention record at or before the cut gives the size up to it; the segments
    between the two add their bytes (the cut's offset or the size at sealing, less the
    record's offset). 5 queries (at most 7 when no record precedes the cut). Rows: the cut's
    segments, a few records, and the segments created between the record and the cut (the
    whole history when no record precedes it).
    """
    records = _records(stream, cut)
    end = _cut_segments(stream, cut, records)
    reference, start, start_records = _reference(stream, end, records)
    size = reference.recording_size if reference is not None else 0
    for record in _records_between(stream, start, end, {**start_records, **records}):
        segment = record.as_segment()
        if segment in end:
            upto = end[segment]
        elif record.sealed_size is not None:
            upto = record.sealed_size
        else:
            raise InvalidStreamCutError(f"segment {record} of {stream} lies before {cut} unsealed")
        size += upto - start.get(segment, 0)
    return size


# --- scaling events ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalingEvent:
    """An epoch as the REST ``ScaleMetadata``: when it began, its segments, what changed."""

    epoch: int
    timestamp: int
    segments: tuple[Segment, ...]
    splits: int
    merges: int


def scaling_events(
    stream: Stream, from_time: int, to_time: int, limit: int = SCALING_EVENTS_MAX
) -> list[ScalingEvent]:
    """The epoch current at ``from_time`` and those begun up to ``to_time`` (ms), at most
    ``limit``. 1 query: the time index finds the first epoch, then an ``(stream, epoch)``
    range; ``limit`` + 2 rows.
    """
    at_from = (
        Epoch.objects.filter(stream=stream, creation_time__lte=from_time)
        .order_by("-creation_time", "-epoch")
        .values("epoch")[:1]
    )
    first = Coalesce(Subquery(at_from), 0)
    epochs = list(
        Epoch.objects.filter(stream=stream, epoch__gte=first - 1, creation_time__lte=to_time)
        .annotate(first_epoch=first)
        .order_by("epoch")[: limit + 1]
    )
    events: list[ScalingEvent] = []
    previous: tuple[Segment, ...] = ()
    for epoch in epochs:
        segments = epoch.segment_list()
        if epoch.epoch >= epoch.first_epoch:
            splits, merges = splits_and_merges(previous, segments) if previous else (0, 0)
            events.append(ScalingEvent(epoch.epoch, epoch.creation_time, segments, splits, merges))
        previous = segments
    return events[:limit]


# --- host store -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeUri:
    """The wire-protocol endpoint of the node that serves a segment."""

    host: str
    port: int
    #: The node needs TLS.
    tls: bool = False

    def __str__(self) -> str:
        return f"{'tls://' if self.tls else ''}{self.host}:{self.port}"


def container_count() -> int:
    """How many containers the host store knows: the highest container number plus one
    (1 query, 1 row of the ``number`` index; 0 before any container is registered)."""
    highest = Container.objects.order_by("-number").values_list("number", flat=True).first()
    return 0 if highest is None else highest + 1


def node_uri(segment_name: str, count: int | None = None) -> NodeUri:
    """The endpoint serving ``segment_name`` (any qualified name, transaction segments too).

    Its container is the segment store's stable hash of the name modulo ``count`` (default:
    the host store's ``container_count()``, one more query); the container's assignment names
    the node. 1 query, 3 rows. Raises NoNodeForSegmentError.
    """
    count = container_count() if count is None else count
    if count < 1:
        raise NoNodeForSegmentError(f"no container is registered to serve {segment_name}")
    number = container_for(segment_name, count)
    assignment = (
        ContainerAssignment.objects.select_related("node").filter(container__number=number).first()
    )
    if assignment is None:
        raise NoNodeForSegmentError(f"container {number} of {segment_name} has no node")
    return NodeUri(assignment.node.host, assignment.node.port, assignment.node.tls)


def segment_uri(stream: Stream, segment_id: int, count: int | None = None) -> NodeUri:
    """The endpoint serving segment ``segment_id`` of ``stream`` (as ``node_uri``)."""
    return node_uri(segment_name(stream, segment_id), count)


# --- listings for the console (each a fixed number of queries, whatever the history) ----------

#: How the stream list may be sorted: the URL's ``sort`` value -> ORDER BY.
STREAM_SORTS = {
    "name": ("name",),
    "-name": ("-name",),
    "created": ("created_at", "name"),
    "-created": ("-created_at", "name"),
    "state": ("state", "name"),
}


def scope_listing() -> QuerySet[Scope]:
    """Scopes by name with their stream counts (1 query per page)."""
    return Scope.objects.annotate(stream_count=Count("streams")).order_by("name")


# -- lookups by name (Pravega's gRPC answers "not found" as statuses, not errors) ------------


def scope_named(name: str) -> Scope | None:
    return Scope.objects.filter(name=name).first()


def scope_exists(name: str) -> bool:
    return Scope.objects.filter(name=name).exists()


def stream_named(scope: str, name: str) -> Stream | None:
    """The stream ``scope/name`` (scope joined), or None."""
    return Stream.objects.select_related("scope").filter(scope__name=scope, name=name).first()


def stream_exists(scope: str, name: str) -> bool:
    return Stream.objects.filter(scope__name=scope, name=name).exists()


def scope_names(after: str = "") -> QuerySet[Scope, str]:
    """The scopes' names after ``after``, in order."""
    return Scope.objects.filter(name__gt=after).order_by("name").values_list("name", flat=True)


def kvtable_names(scope: Scope, after: str = "") -> QuerySet[KeyValueTable, str]:
    """The names of ``scope``'s key-value tables after ``after``, in order."""
    rows = KeyValueTable.objects.filter(scope=scope, name__gt=after).order_by("name")
    return rows.values_list("name", flat=True)


def completed_transactions(stream: Stream, limit: int) -> list[CompletedTransaction]:
    """The stream's newest ``limit`` completed transactions, newest first."""
    return list(CompletedTransaction.objects.filter(stream=stream).order_by("-pk")[:limit])


def live_controller_endpoints() -> list[tuple[str, int]]:
    """The gRPC endpoints (host, port) of the controllers whose session is live."""
    rows = Node.objects.filter(
        role=NodeRole.CONTROLLER, session=SessionState.LIVE, grpc_port__isnull=False
    )
    return [(host, port) for host, port in rows.values_list("host", "grpc_port") if port]


#: A name starting with it is internal (a reader group's or a writer's own stream, as Pravega's
#: ``_RG...`` and ``_MARK...``): listings leave such streams out unless asked for them.
INTERNAL_PREFIX = "_"


def streams_in(scope: Scope, *, internal: bool = False, after: str = "") -> QuerySet[Stream]:
    """The streams of ``scope`` after the name ``after``, by name: the user's, or with
    ``internal`` the internal ones only."""
    rows = Stream.objects.select_related("scope").filter(scope=scope, name__gt=after)
    if internal:
        return rows.filter(name__startswith=INTERNAL_PREFIX).order_by("name")
    return rows.exclude(name__startswith=INTERNAL_PREFIX).order_by("name")


def stream_listing(
    scope: Scope, *, text: str = "", tag: str = "", sort: str = "name"
) -> QuerySet[Stream]:
    """The streams of ``scope`` whose name contains ``text``, tagged ``tag`` (when given),
    sorted by ``STREAM_SORTS[sort]``. Each row carries ``segment_list`` (its tail epoch's
    segments, encoded) and ``size`` (bytes up to its newest retention record, or None): one
    query per page."""
    rows = Stream.objects.select_related("scope").filter(scope=scope)
    if text:
        rows = rows.filter(name__icontains=text)
    if tag:
        rows = rows.filter(pk__in=StreamTag.objects.filter(scope=scope, tag=tag).values("stream"))
    tail = Epoch.objects.filter(stream=OuterRef("pk"), epoch=OuterRef("current_epoch"))
    newest = StreamCutRecord.objects.filter(stream=OuterRef("pk")).order_by("-recording_time")
    return rows.annotate(
        segment_list=Subquery(tail.values("segments")[:1]),
        size=Subquery(newest.values("recording_size")[:1]),
    ).order_by(*STREAM_SORTS.get(sort, STREAM_SORTS["name"]))


def tags_of(streams: Iterable[Stream]) -> dict[int, list[str]]:
    """Stream pk -> its tags, sorted (1 query)."""
    tags: dict[int, list[str]] = {}
    rows = StreamTag.objects.filter(stream__in=[x.pk for x in streams]).order_by("tag")
    for stream_id, tag in rows.values_list("stream_id", "tag"):
        tags.setdefault(stream_id, []).append(tag)
    return tags


def scope_tags(scope: Scope, limit: int = 200) -> list[str]:
    """The distinct tags used in ``scope`` (1 query, at most ``limit``)."""
    rows = StreamTag.objects.filter(scope=scope).order_by("tag").values_list("tag", flat=True)
    return list(rows.distinct()[:limit])


def epoch_page(stream: Stream, before: int | None, size: int) -> list[Epoch]:
    """Up to ``size`` epochs of ``stream`` below ``before`` (default: all), oldest first
    (1 query)."""
    rows = Epoch.objects.filter(stream=stream)
    if before is not None:
        rows = rows.filter(epoch__lt=before)
    return list(reversed(rows.order_by("-epoch")[:size]))


def retention_set(stream: Stream, limit: int = 20) -> list[StreamCutRecord]:
    """The newest records of the stream's retention set, newest first (1 query)."""
    return list(StreamCutRecord.objects.filter(stream=stream).order_by("-recording_time")[:limit])


def cut_recorded_before(stream: Stream, timestamp: int) -> StreamCutRecord | None:
    """The newest retention record taken at or before ``timestamp`` (1 query)."""
    rows = StreamCutRecord.objects.filter(stream=stream, recording_time__lte=timestamp)
    return rows.order_by("-recording_time").first()


def live_transactions(
    scope: Scope, stream: Stream | None = None, limit: int = 500, writer_id: str | None = None
) -> list[Any]:
    """Open, committing and aborting transactions of ``scope`` (or of one stream; or of one
    writer), oldest first, with their streams (1 query)."""
    rows = Transaction.objects.select_related("stream", "stream__scope").filter(
        stream__scope=scope, state__in=[TxnState.OPEN, TxnState.COMMITTING, TxnState.ABORTING]
    )
    if stream is not None:
        rows = rows.filter(stream=stream)
    if writer_id is not None:
        rows = rows.filter(writer_id=writer_id)
    return list(rows.order_by("created_at")[:limit])


def reader_groups_of(scope: Scope) -> list[ReaderGroup]:
    """The reader groups of ``scope`` by name (1 query)."""
    return list(ReaderGroup.objects.filter(scope=scope).order_by("name")[:1000])


def reader_groups_reading(stream: Stream) -> list[ReaderGroup]:
    """The reader groups (of any scope) configured to read ``stream`` (1 query)."""
    rows = ReaderGroup.objects.select_related("scope")
    return list(rows.filter(configuration__streams__has_key=stream.scoped_name).order_by("name"))


def segment_store_nodes() -> Any:
    """The segment store nodes that may serve (a query set): not the controllers a cluster
    registers, not the nodes that left it."""
    return Node.objects.exclude(role=NodeRole.CONTROLLER).exclude(session=SessionState.LEFT)


def nodes_with_containers() -> list[Node]:
    """Registered segment store nodes with ``container_count`` (1 query)."""
    found = segment_store_nodes().annotate(container_count=Count("assignments"))
    return list(found.order_by("node_id"))


def workflow_counts() -> list[TaskCount]:
    """How often each workflow task ended ok or failed (1 query)."""
    return list(TaskCount.objects.order_by("task", "outcome"))


def busy_streams(limit: int = 20) -> list[Stream]:
    """Streams a workflow holds off ACTIVE now (scaling, truncating ...) (1 query)."""
    settled = [StreamState.ACTIVE, StreamState.SEALED]
    return list(Stream.objects.select_related("scope").exclude(state__in=settled)[:limit])


def audit_entries(
    *, user: str = "", obj: str = "", action: str = "", since: Any = None, until: Any = None
) -> QuerySet[AuditEntry]:
    """Audit rows, newest first: ``user`` exact, ``obj`` a prefix (``scope/`` finds all of a
    scope), ``action`` a prefix (``stream.`` all of streams), ``since``/``until`` datetimes."""
    rows = AuditEntry.objects.all()
    if user:
        rows = rows.filter(username=user)
    if obj:
        rows = rows.filter(object__startswith=obj)
    if action:
        rows = rows.filter(action__startswith=action)
    if since is not None:
        rows = rows.filter(at__gte=since)
    if until is not None:
        rows = rows.filter(at__lte=until)
    return rows.order_by("-at", "-id")


def canary_probes() -> list[dict[str, Any]]:
    """What the canary last saw of each node, by node (1 query)."""
    now = timezone.now()
    return [
        {
            "node": probe.node, "ok": probe.succeeded_at is not None
            and (probe.succeeded_at >= probe.probed_at),
            "successAgeSeconds": None if probe.succeeded_at is None
            else round((now - probe.succeeded_at).total_seconds()),
            "ackMs": None if probe.ack_seconds is None else round(probe.ack_seconds * 1000, 1),
            "readMs": None if probe.read_seconds is None else round(probe.read_seconds * 1000, 1),
            "successes": probe.successes, "failures": probe.failures,
            "lastError": probe.last_error,
        }
        for probe in CanaryProbe.objects.order_by("node")
    ]  # fmt: skip
