"""Manual scale: seal some segments of the current epoch and replace them by new ones.

The request checks that the new key ranges cover exactly the ranges of the segments it seals,
then records its intent in one database transaction: the stream goes ACTIVE → SCALING and an
``EpochTransition`` (REQUESTED) names the segments to seal, the new ranges and the new epoch.
The Celery task runs ``run_scale``: new segments are created in the segment store, the old ones
sealed (their final sizes read back), and the new epoch, the new segment records and the
sealing of the old ones are written with SCALING → ACTIVE in one database transaction.
Each step may run twice: creating an existing segment and sealing a sealed one succeed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from django.db import transaction

from controller_app import dispatch
from controller_app import selectors as sel
from controller_app.choices import EPOCH_TRANSITION_PENDING, EpochTransitionState, StreamState
from controller_app.errors import (
    EpochChangedError,
    InvalidArgumentError,
    PreconditionFailedError,
    SegmentNotFoundError,
)
from controller_app.models import Epoch, EpochTransition, SegmentRecord, Stream, transition
from controller_app.ports import SegmentStorePort
from controller_app.segments import Segment, encode_segments
from controller_app.workflows.common import get_stream, now_ms, step, wait_until
from controller_app.workflows.config import SEGMENTS_PER_EPOCH_MAX
from controller_app.workflows.room import check_room
from controller_app.workflows.streams import start_when_active
from millrace.kernel import defaults
from millrace.kernel.naming import segment_epoch, segment_number

_EPSILON = 1e-9
_S, _E = StreamState, EpochTransitionState


def _intervals(ranges: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted ranges with touching ones joined."""
    joined: list[tuple[float, float]] = []
    for start, end in sorted(ranges):
        if joined and abs(joined[-1][1] - start) <= _EPSILON:
            joined[-1] = (joined[-1][0], end)
        else:
            joined.append((start, end))
    return joined


def check_new_ranges(
    sealed: Sequence[Segment], new_ranges: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """``new_ranges`` sorted, if they cover exactly the key ranges of ``sealed``."""
    if not sealed:
        raise InvalidArgumentError("a scale seals at least one segment")
    if not new_ranges:
        raise InvalidArgumentError("a scale creates at least one segment")
    ranges = sorted((float(a), float(b)) for a, b in new_ranges)
    for start, end in ranges:
        if not 0.0 <= start < end <= 1.0:
            raise InvalidArgumentError(f"key range [{start}, {end}) is not within [0, 1)")
    for (_, end), (start, _) in itertools.pairwise(ranges):
        if start < end - _EPSILON:
            raise InvalidArgumentError(f"new key ranges overlap at {start}")
        if start > end + _EPSILON:
            raise InvalidArgumentError(f"new key ranges leave a gap between {end} and {start}")
    old = _intervals((s.key_start, s.key_end) for s in sealed)
    new = _intervals(ranges)
    same = len(old) == len(new) and all(
        abs(a[0] - b[0]) <= _EPSILON and abs(a[1] - b[1]) <= _EPSILON
        for a, b in zip(old, new, strict=True)
    )
    if not same:
        raise InvalidArgumentError(
            f"the new key ranges {new} do not cover exactly the sealed segments' ranges {old}"
        )
    return ranges


#: How many of a stream's newest scales a request is compared with to find a repeat of it.
_REPEATS_LOOKED_AT = 16


def scale_stream(
    scope: str,
    name: str,
    sealed_segment_ids: Sequence[int],
    new_ranges: Sequence[tuple[float, float]],
    *,
    scale_time: int | None = None,
    wait: float | None = defaults.WORKFLOW_WAIT_SECONDS,
) -> EpochTransition:
    """Replace the segments ``sealed_segment_ids`` by new ones with ``new_ranges``."""
    stream = get_stream(scope, name)
    if stream.state in (_S.SEALING, _S.SEALED, _S.DELETING):
        raise PreconditionFailedError(f"stream {scope}/{name} is {stream.state.lower()}")
    current = {s.id: s for s in sel.current_segments(stream)}
    wanted = list(dict.fromkeys(int(i) for i in sealed_segment_ids))
    earlier = _same_scale(stream, wanted, new_ranges)
    if earlier is not None:  # a repeat (the first answered 503, or its answer was lost)
        return _repeated(earlier, wait, f"scale of stream {scope}/{name}")
    check_room(scope, segments=len(new_ranges) - len(wanted))
    unknown = [i for i in wanted if i not in current]
    for segment_id in unknown:
        try:
            sel.segment_record(stream, segment_id)
        except SegmentNotFoundError:
            continue
        # It was current once: the stream moved on (a scale or a rolling transaction commit)
        # since the caller read its segments. A conflict, as when that happens mid-request.
        raise EpochChangedError(
            f"segment {segment_id} of {scope}/{name} is no longer current (the stream is at"
            f" epoch {stream.current_epoch}); read its current segments and ask again"
        )
    if unknown:
        raise InvalidArgumentError(
            f"segment {unknown[0]} is not a current segment of {scope}/{name}"
        )
    ranges = check_new_ranges([current[i] for i in wanted], new_ranges)
    if len(current) - len(wanted) + len(ranges) > SEGMENTS_PER_EPOCH_MAX:
        raise InvalidArgumentError(f"an epoch holds at most {SEGMENTS_PER_EPOCH_MAX} segments")
    created: list[EpochTransition] = []

    def record(locked: Stream) -> None:
        if locked.current_epoch != stream.current_epoch:
            raise EpochChangedError(
                f"stream {scope}/{name} moved to epoch {locked.current_epoch} since the request"
                f" read epoch {stream.current_epoch}; read its current segments and ask again"
            )
        last = sel.current_epoch(locked).creation_time
        created.append(
            EpochTransition.objects.create(
                stream=locked,
                active_epoch=locked.current_epoch,
                new_epoch=locked.current_epoch + 1,
                segments_to_seal=wanted,
                new_ranges=[list(r) for r in ranges],
                scale_time=max(scale_time or now_ms(), last),
            )
        )

    start_when_active(scope, name, _S.SCALING, wait, "scale", then=record)
    job = created[-1]
    dispatch.send_on_commit(dispatch.SCALE_STREAM, stream.pk)
    return wait_until(lambda: _finished(job.pk), wait, f"scale of stream {scope}/{name}") or job


def _same_scale(
    stream: Stream, wanted: Sequence[int], new_ranges: Sequence[tuple[float, float]]
) -> EpochTransition | None:
    """The scale recorded earlier that seals exactly ``wanted`` into ``new_ranges``, if any.
    Segment ids are never reused, so such a scale is this very request made again."""
    ranges = sorted((float(a), float(b)) for a, b in new_ranges)
    for job in EpochTransition.objects.filter(stream=stream).order_by("-pk")[:_REPEATS_LOOKED_AT]:
        theirs = sorted((float(a), float(b)) for a, b in job.new_ranges)
        if (
            sorted(job.segments_to_seal) == sorted(wanted)
            and len(theirs) == len(ranges)
            and all(
                abs(a[0] - b[0]) <= _EPSILON and abs(a[1] - b[1]) <= _EPSILON
                for a, b in zip(theirs, ranges, strict=True)
            )
        ):
            return job
    return None


def _repeated(job: EpochTransition, wait: float | None, what: str) -> EpochTransition:
    """A repeated scale: its first request's job, sent again while it is pending (the broker
    may not have taken its task), never recorded twice."""
    if job.state in EPOCH_TRANSITION_PENDING:
        dispatch.send(dispatch.SCALE_STREAM, job.stream_id)
    return wait_until(lambda: _finished(job.pk), wait, what) or job


def _finished(transition_id: int) -> EpochTransition | None:
    job = EpochTransition.objects.get(pk=transition_id)
    return job if job.state not in EPOCH_TRANSITION_PENDING else None


def _new_segments(stream: Stream, job: EpochTransition) -> list[Segment]:
    """The segments the scale creates: numbers after the active epoch's highest (the newest
    segments are always in the current epoch), in key order. The same on every run."""
    active = sel.epoch_record(stream, job.active_epoch).segment_list()
    base = max(s.number for s in active) + 1
    return [
        Segment(base + i, job.new_epoch, float(start), float(end), job.scale_time)
        for i, (start, end) in enumerate(job.new_ranges)
    ]


def run_scale(store: SegmentStorePort, stream_id: int) -> None:
    """Task step: carry out the stream's pending scale (see the module docstring)."""
    stream = Stream.objects.select_related("scope").filter(pk=stream_id).first()
    if stream is None or stream.state != _S.SCALING:
        return
    job = EpochTransition.objects.filter(
        stream=stream, state__in=sorted(EPOCH_TRANSITION_PENDING)
    ).first()
    if job is None:  # the intent never got recorded with the state: nothing to do
        transition(stream, _S.SCALING, _S.ACTIVE)
        return
    if job.state == _E.REQUESTED:
        transition(job, _E.REQUESTED, _E.STARTED)
    new = _new_segments(stream, job)
    store.create_all([sel.segment_name(stream, segment.id) for segment in new])
    step("scale.create")
    sizes = {sid: store.seal(sel.segment_name(stream, sid)) for sid in job.segments_to_seal}
    step("scale.seal")
    _complete(stream, job, new, sizes)
    step("scale.complete")


def _complete(
    stream: Stream, job: EpochTransition, new: list[Segment], sizes: dict[int, int]
) -> None:
    active = sel.epoch_record(stream, job.active_epoch).segment_list()
    kept = [s for s in active if s.id not in sizes]
    segments = sorted(kept + new, key=lambda s: s.key_start)
    with transaction.atomic():
        Epoch.objects.create(
            stream=stream, epoch=job.new_epoch, reference_epoch=job.new_epoch,
            creation_time=job.scale_time, segments=encode_segments(segments),
        )  # fmt: skip
        SegmentRecord.objects.bulk_create(
            SegmentRecord(
                stream=stream, number=s.number, creation_epoch=s.creation_epoch,
                key_start=s.key_start, key_end=s.key_end, creation_time=s.creation_time,
            )
            for s in new
        )  # fmt: skip
        for sid, size in sizes.items():
            SegmentRecord.objects.filter(
                stream=stream, creation_epoch=segment_epoch(sid), number=segment_number(sid)
            ).update(sealing_epoch=job.new_epoch, sealed_size=size)
        transition(stream, _S.SCALING, _S.ACTIVE, current_epoch=job.new_epoch)
        transition(job, _E.STARTED, _E.COMPLETED)
