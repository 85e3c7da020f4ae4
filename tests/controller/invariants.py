"""The invariant checker of a stream's metadata against the segment store (crash tests use it).

Checks: epochs contiguous from 0 to the current one; each epoch's ranges cover [0, 1)
disjointly; segment ids carry their creation epoch; every segment of an epoch has a record;
segments recorded as sealed (a sealing epoch or a sealed size) are sealed in the segment store;
open current segments exist unsealed; truncation records never move back; no orphan segments
(a segment store segment of the stream with no record, or a deleted-by-truncation segment
still there). Returns the list of violations (empty when all hold).
"""

from __future__ import annotations

import itertools

from controller_app import selectors as sel
from controller_app.choices import StreamState
from controller_app.models import Epoch, SegmentRecord, Stream, TruncationRecord
from controller_app.segment_client import segment_store
from controller_app.segments import CutOrder, compare_cuts, keyspace_gap
from millrace.kernel.naming import segment_epoch


def check_stream(stream: Stream) -> list[str]:
    problems: list[str] = []
    port = segment_store()
    epochs = list(Epoch.objects.filter(stream=stream).order_by("epoch"))
    numbers = [e.epoch for e in epochs]
    if numbers != list(range(stream.current_epoch + 1)):
        problems.append(f"epochs {numbers} are not contiguous up to {stream.current_epoch}")
    records = {r.segment_id: r for r in SegmentRecord.objects.filter(stream=stream)}
    for epoch in epochs:
        segments = epoch.segment_list()
        gap = keyspace_gap(segments)
        if gap is not None:
            problems.append(f"epoch {epoch.epoch}: {gap}")
        for segment in segments:
            if segment_epoch(segment.id) != segment.creation_epoch:
                problems.append(f"segment {segment.id} does not carry its creation epoch")
            if segment.id not in records:
                problems.append(f"epoch {epoch.epoch}: segment {segment.id} has no record")
    truncations = list(TruncationRecord.objects.filter(stream=stream).order_by("number"))
    deleted = {int(i) for t in truncations for i in t.deleted_segments}
    for earlier, later in itertools.pairwise(truncations):
        if compare_cuts(earlier.cut(), later.cut()) not in (CutOrder.BEFORE, CutOrder.EQUAL):
            problems.append(f"truncation {later.number} moved back from {earlier.number}")
    current = {s.id for s in sel.epoch_record(stream, stream.current_epoch).segment_list()}
    sealed_stream = stream.state in (StreamState.SEALED, StreamState.DELETING)
    for segment_id, record in records.items():
        state = port.info(sel.segment_name(stream, segment_id))
        if segment_id in deleted:
            if state.exists:
                problems.append(f"segment {segment_id} was truncated away but still exists")
            continue
        if not state.exists:
            problems.append(f"segment {segment_id} has a record but no segment in the store")
            continue
        recorded_sealed = record.sealing_epoch is not None or record.sealed_size is not None
        if recorded_sealed and not state.sealed:
            problems.append(f"segment {segment_id} is recorded sealed but open in the store")
        if (
            recorded_sealed
            and record.sealed_size is not None
            and record.sealed_size != state.length
        ):
            problems.append(
                f"segment {segment_id}: sealed size {record.sealed_size} != length {state.length}"
            )
        if segment_id in current and not sealed_stream and state.sealed:
            problems.append(f"current segment {segment_id} is sealed in the store")
    # Orphans: the next numbers after the highest recorded one must not exist in the store.
    highest = max(r.number for r in records.values())
    for number in range(highest + 1, highest + 4):
        for epoch in range(stream.current_epoch + 1, stream.current_epoch + 3):
            name = f"{stream.scope.name}/{stream.name}/{number}.#epoch.{epoch}"
            if port.info(name).exists:
                problems.append(f"orphan segment {name} in the store")
    return problems
