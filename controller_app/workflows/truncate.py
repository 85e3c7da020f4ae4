"""Truncation: move the stream's head forward to a stream cut; data before it is deleted.

The request checks the cut (a valid position, not before the current head: truncation never
moves back) and records it in one database transaction with ACTIVE → TRUNCATING: a new
``TruncationRecord`` that names the cut and the segments wholly before it. Readers take the
head from that record at once. The Celery task runs ``run_truncate``: the segments wholly
before the cut are deleted from the segment store, those of the cut truncated at its offsets,
and the stream goes back to ACTIVE. Deleting a deleted segment and truncating again at the
same offset succeed, so the step may run twice.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller_app import dispatch
from controller_app import selectors as sel
from controller_app.choices import StreamState
from controller_app.errors import InvalidStreamCutError, PreconditionFailedError
from controller_app.models import Stream, TruncationRecord, transition
from controller_app.ports import SegmentStorePort
from controller_app.segments import CutOrder, encode_segments, encode_stream_cut
from controller_app.workflows.common import get_stream, step, wait_until
from controller_app.workflows.streams import start_when_active
from millrace.kernel import defaults

_S = StreamState


def truncate_stream(
    store: SegmentStorePort,
    scope: str,
    name: str,
    stream_cut: Mapping[int, int],
    *,
    wait: float | None = defaults.WORKFLOW_WAIT_SECONDS,
) -> Stream:
    """Truncate ``scope/name`` at ``stream_cut`` ({segment id: offset})."""
    stream = get_stream(scope, name)
    if stream.state in (_S.SEALING, _S.SEALED, _S.DELETING):
        raise PreconditionFailedError(f"stream {scope}/{name} is {stream.state.lower()}")
    cut = {int(k): int(v) for k, v in stream_cut.items()}
    records: list[TruncationRecord] = []

    def record(locked: Stream) -> None:
        records.append(_record(locked, cut))

    _record(stream, cut, save=False)  # check before taking the stream: a clear error at once
    _check_lengths(store, stream, cut)
    start_when_active(scope, name, _S.TRUNCATING, wait, "truncate", then=record)
    dispatch.send_on_commit(dispatch.TRUNCATE_STREAM, stream.pk)
    number = records[-1].number

    def done() -> Stream | None:
        current = get_stream(scope, name)
        applied = current.state != _S.TRUNCATING
        latest = sel.latest_truncation(current)
        return current if applied and latest is not None and latest.number >= number else None

    return wait_until(done, wait, f"truncation of stream {scope}/{name}") or stream


def _check_lengths(store: SegmentStorePort, stream: Stream, cut: dict[int, int]) -> None:
    for segment_id, offset in cut.items():
        length = store.info(sel.segment_name(stream, segment_id)).length
        if offset > length:
            raise InvalidStreamCutError(
                f"offset {offset} is beyond the end ({length}) of segment {segment_id}"
            )


def _record(stream: Stream, cut: dict[int, int], *, save: bool = True) -> TruncationRecord:
    """The truncation record for ``cut``, checked against the current head."""
    segments = sel.validate_stream_cut(stream, cut)
    head = {s.id: o for s, o in sel.head_segments(stream).items()}
    order = sel.compare_stream_cuts(stream, head, cut)
    if order not in (CutOrder.BEFORE, CutOrder.EQUAL):
        raise InvalidStreamCutError(
            f"the cut is not after the current head of {stream} (truncation never moves back)"
        )
    between = sel.segments_between(stream, head, cut)
    deleted = sorted(s.id for s in between if s not in segments)
    latest = sel.latest_truncation(stream)
    high = max(s.creation_epoch for s in segments)
    records = sel._records(stream, cut)
    low = min(
        high if r.sealing_epoch is None else min(high, r.sealing_epoch - 1)
        for r in records.values()
    )
    truncation = TruncationRecord(
        stream=stream,
        number=(latest.number if latest else 0) + 1,
        stream_cut=encode_stream_cut(cut),
        segments=encode_segments(sorted(segments, key=lambda s: s.key_start)),
        span_low_epoch=low,
        span_high_epoch=high,
        deleted_segments=deleted,
    )
    if save:
        truncation.save()
    return truncation


def run_truncate(store: SegmentStorePort, stream_id: int) -> None:
    """Task step: apply the latest truncation record in the segment store; TRUNCATING → ACTIVE."""
    stream = Stream.objects.select_related("scope").filter(pk=stream_id).first()
    if stream is None or stream.state != _S.TRUNCATING:
        return
    truncation = sel.latest_truncation(stream)
    if truncation is not None:
        for segment_id in truncation.deleted_segments:
            store.delete(sel.segment_name(stream, int(segment_id)))
        step("truncate.delete")
        for segment, offset in truncation.cut().items():
            name = sel.segment_name(stream, segment.id)
            if store.info(name).start_offset < offset:
                store.truncate(name, offset)
        step("truncate.segments")
    transition(stream, _S.TRUNCATING, _S.ACTIVE)
