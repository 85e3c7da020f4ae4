"""Stream lifecycle: create, update, seal, delete.

Create runs in the caller (as Pravega's controller does): the stream row is written CREATING
with epoch 0 and its segment records, then the segments are created in the segment store and
the stream becomes ACTIVE. A crash in between leaves it CREATING; the same create again, or
the sweeper, finishes it. Update changes only metadata, in one database transaction under the
stream's compare-and-swap. Seal and delete record their intent (SEALING, DELETING), send a
Celery task on commit, and the task does the segment store work (``run_seal``,
``run_delete``); the caller may wait for the outcome. Every ``run_*`` step checks the state it
expects, so it may run twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction

from controller_app import dispatch
from controller_app import selectors as sel
from controller_app.choices import BucketService, StreamState
from controller_app.errors import (
    AlreadyExistsError,
    ConflictError,
    EpochChangedError,
    InvalidArgumentError,
    PreconditionFailedError,
    WorkflowTimeoutError,
)
from controller_app.models import (
    Epoch,
    Scope,
    SegmentRecord,
    Stream,
    StreamBucket,
    StreamTag,
    Transaction,
    transition,
)
from controller_app.ports import SegmentStorePort
from controller_app.segments import Segment, bucket_for, encode_segments, uniform_ranges
from controller_app.workflows.common import get_stream, now_ms, step, wait_until
from controller_app.workflows.config import StreamConfig, check_name
from controller_app.workflows.room import check_room
from controller_app.workflows.scopes import get_scope
from millrace.kernel import defaults, schema_policy
from millrace.kernel.naming import KAFKA_RECORDS_MARK, transaction_segment_name

#: Buckets the periodic services spread streams over (Pravega's default is 100).
BUCKET_COUNT = 100
#: States in which a stream is being changed by a workflow: a new request waits for ACTIVE.
BUSY = frozenset(
    {
        StreamState.CREATING,
        StreamState.UPDATING,
        StreamState.SCALING,
        StreamState.TRUNCATING,
        StreamState.COMMITTING_TXN,
    }
)


# -- create ------------------------------------------------------------------------------------


def create_stream(store: SegmentStorePort, scope: str, name: str, config: StreamConfig) -> Stream:
    """Create ``scope/name`` with ``config`` and its epoch-0 segments; return it ACTIVE.

    A retry of the same create finishes a half-done one; a stream that exists with another
    configuration, or is past creation, is ``AlreadyExistsError``.
    """
    check_name("stream", name)
    config.validate()
    scope_row = get_scope(scope)
    try:
        with transaction.atomic():
            stream = Stream.objects.select_related("scope").filter(scope=scope_row, name=name)
            existing = stream.first()
            if existing is None:
                if not name.startswith(sel.INTERNAL_PREFIX):
                    check_room(scope, streams=1, segments=config.min_segments)
                created = _insert_stream(scope_row, name, config)
            elif existing.state == StreamState.CREATING and _same_config(existing, config):
                created = existing
            else:
                raise AlreadyExistsError(f"stream {scope}/{name} exists already")
    except IntegrityError:  # a concurrent create won the race
        raise AlreadyExistsError(f"stream {scope}/{name} exists already") from None
    complete_create(store, created.pk)
    return get_stream(scope, name)


def _same_config(stream: Stream, config: StreamConfig) -> bool:
    tags = tuple(sel.stream_tags(stream))
    return StreamConfig.from_stream(stream, tags) == StreamConfig(
        **{**config.__dict__, "tags": tuple(sorted(set(config.tags)))}
    )


def _insert_stream(scope_row: Scope, name: str, config: StreamConfig) -> Stream:
    stream = Stream.objects.create(
        scope=scope_row, name=name, state=StreamState.CREATING, **config.model_fields()
    )
    _set_tags(stream, config.tags)
    StreamBucket.objects.bulk_create(
        StreamBucket(stream=stream, service=service, bucket=_bucket(stream))
        for service in BucketService.values
    )
    created = now_ms()
    segments = [
        Segment(number, 0, start, end, created)
        for number, (start, end) in enumerate(uniform_ranges(config.min_segments))
    ]
    Epoch.objects.create(
        stream=stream, epoch=0, reference_epoch=0, creation_time=created,
        segments=encode_segments(segments),
    )  # fmt: skip
    SegmentRecord.objects.bulk_create(
        SegmentRecord(
            stream=stream, number=s.number, creation_epoch=0, key_start=s.key_start,
            key_end=s.key_end, creation_time=created,
        )
        for s in segments
    )  # fmt: skip
    return stream


def _bucket(stream: Stream) -> int:
    return bucket_for(stream.scope.name, stream.name, BUCKET_COUNT)


def _set_tags(stream: Stream, tags: tuple[str, ...]) -> None:
    StreamTag.objects.filter(stream=stream).delete()
    StreamTag.objects.bulk_create(
        StreamTag(scope_id=stream.scope_id, stream=stream, tag=tag) for tag in sorted(set(tags))
    )


def complete_create(store: SegmentStorePort, stream_id: int) -> None:
    """Create the epoch-0 segments in the segment store and make the stream ACTIVE."""
    stream = Stream.objects.select_related("scope").filter(pk=stream_id).first()
    if stream is None or stream.state != StreamState.CREATING:
        return
    segments = sel.epoch_record(stream, 0).segment_list()
    store.create_all([sel.segment_name(stream, segment.id) for segment in segments])
    step("create.segments")
    with contextlib.suppress(ConflictError):  # another run finished it
        transition(stream, StreamState.CREATING, StreamState.ACTIVE)


# -- update ------------------------------------------------------------------------------------


def update_stream(
    scope: str, name: str, config: StreamConfig, *, wait: float = defaults.WORKFLOW_WAIT_SECONDS
) -> Stream:
    """Replace the stream's configuration and tags (metadata only); waits for a busy stream.

    Scaling policy changes take effect at the next scale decision; a higher ``min_segments``
    does not split the current segments by itself.
    """
    config.validate()

    def attempt() -> Stream | None:
        stream = get_stream(scope, name)
        _refuse_when_sealed(stream, "update")
        if stream.state != StreamState.ACTIVE:
            return None
        try:
            with transaction.atomic():
                transition(
                    stream, StreamState.ACTIVE, StreamState.UPDATING, **config.model_fields()
                )
                _set_tags(stream, config.tags)
                transition(stream, StreamState.UPDATING, StreamState.ACTIVE)
        except ConflictError:
            return None
        return stream

    return wait_until(attempt, wait, f"update of stream {scope}/{name}")  # type: ignore[no-any-return]


def _refuse_when_sealed(stream: Stream, what: str) -> None:
    if stream.state in (StreamState.SEALING, StreamState.SEALED, StreamState.DELETING):
        raise PreconditionFailedError(f"stream {stream} is {stream.state.lower()}: cannot {what}")


def start_when_active(
    scope: str,
    name: str,
    to_state: str,
    wait: float | None,
    what: str,
    then: Callable[[Stream], Any] | None = None,
) -> Stream:
    """Move the stream ACTIVE → ``to_state`` as soon as it is ACTIVE (waiting up to ``wait``
    seconds while another workflow holds it) and run ``then(stream)`` in the same database
    transaction (the rest of the intent). Never waits inside a transaction."""

    def attempt() -> Stream | None:
        stream = get_stream(scope, name)
        if stream.state != StreamState.ACTIVE:
            if stream.state not in BUSY:
                raise PreconditionFailedError(
                    f"stream {scope}/{name} is {stream.state.lower()}: cannot {what}"
                )
            return None
        try:
            with transaction.atomic():
                transition(stream, StreamState.ACTIVE, to_state)
                if then is not None:
                    then(stream)
        except EpochChangedError:
            raise  # the request itself is stale: waiting cannot help
        except ConflictError:
            return None
        return stream

    try:
        return wait_until(attempt, defaults.WORKFLOW_WAIT_SECONDS if wait is None else wait, what)  # type: ignore[no-any-return]
    except WorkflowTimeoutError:
        raise WorkflowTimeoutError(
            f"stream {scope}/{name} stayed busy with another workflow; {what} was not started"
        ) from None


# -- seal --------------------------------------------------------------------------------------


def seal_stream(
    scope: str, name: str, *, wait: float | None = defaults.WORKFLOW_WAIT_SECONDS
) -> Stream:
    """Seal every segment of the stream; no more writes. Sealed already is fine."""
    stream = get_stream(scope, name)
    if stream.state == StreamState.DELETING:
        raise PreconditionFailedError(f"stream {scope}/{name} is being deleted")
    if stream.state not in (StreamState.SEALING, StreamState.SEALED):
        stream = start_when_active(scope, name, StreamState.SEALING, wait, "seal")
        # Lost if we die now: the sweeper sends it.
        dispatch.send_on_commit(dispatch.SEAL_STREAM, stream.pk)
    elif stream.state == StreamState.SEALING:
        # Maybe lost: sending again is harmless.
        dispatch.send_on_commit(dispatch.SEAL_STREAM, stream.pk)

    def sealed() -> Stream | None:
        current = get_stream(scope, name)
        return current if current.state == StreamState.SEALED else None

    return wait_until(sealed, wait, f"seal of stream {scope}/{name}") or stream


def run_seal(store: SegmentStorePort, stream_id: int) -> None:
    """Task step: seal the current segments in the segment store, then SEALING → SEALED."""
    stream = Stream.objects.select_related("scope").filter(pk=stream_id).first()
    if stream is None or stream.state != StreamState.SEALING:
        return
    tail = sel.current_epoch(stream)
    for segment in tail.segment_list():
        size = store.seal(sel.segment_name(stream, segment.id))
        SegmentRecord.objects.filter(
            stream=stream, creation_epoch=segment.creation_epoch, number=segment.number
        ).update(sealed_size=size)
        step("seal.segment")
    with contextlib.suppress(ConflictError):
        transition(stream, StreamState.SEALING, StreamState.SEALED)


# -- delete ------------------------------------------------------------------------------------


def delete_stream(
    scope: str, name: str, *, wait: float | None = defaults.WORKFLOW_WAIT_SECONDS
) -> None:
    """Delete a sealed stream: all its segments, then its records."""
    stream = get_stream(scope, name)
    if stream.state == StreamState.SEALED:
        with transaction.atomic():
            try:
                stream = transition(stream, StreamState.SEALED, StreamState.DELETING)
            except ConflictError:
                stream = get_stream(scope, name)
            dispatch.send_on_commit(dispatch.DELETE_STREAM, stream.pk)
    elif stream.state == StreamState.DELETING:
        dispatch.send_on_commit(dispatch.DELETE_STREAM, stream.pk)
    else:
        raise PreconditionFailedError(
            f"stream {scope}/{name} is {stream.state.lower()}: seal it before deleting it"
        )
    stream_id = stream.pk
    wait_until(
        lambda: not Stream.objects.filter(pk=stream_id).exists(),
        wait,
        f"deletion of stream {scope}/{name}",
    )


def run_delete(store: SegmentStorePort, stream_id: int) -> None:
    """Task step: delete every segment of the stream from the segment store, then its rows."""
    stream = Stream.objects.select_related("scope").filter(pk=stream_id).first()
    if stream is None or stream.state != StreamState.DELETING:
        return
    for txn in Transaction.objects.filter(stream=stream):
        for segment in sel.epoch_record(stream, txn.epoch).segment_list():
            store.delete(transaction_segment_name(sel.segment_name(stream, segment.id), txn.hex))
    records = SegmentRecord.objects.filter(stream=stream).only("number", "creation_epoch")
    for record in records.iterator(chunk_size=1000):
        name = sel.segment_name(stream, record.segment_id)
        store.delete(name)
        # (its records' keys, times and headers, where Kafka's clients wrote to it: none found
        # is no error)
        store.delete(name + KAFKA_RECORDS_MARK)
    step("delete.segments")
    Stream.objects.filter(pk=stream_id, state=StreamState.DELETING).delete()


# -- schema binding ------------------------------------------------------------------------


def bind_schema(
    row: Stream, *, subject: str | None = None, enforcement: str | None = None
) -> Stream:
    """Name the stream's value subject ('' or the default name: the default) and/or its
    enforcement mode (one of ``MODES``); the segment stores apply it within about a second."""
    if enforcement is not None and enforcement not in schema_policy.MODES:
        raise InvalidArgumentError(f"enforcement must be one of {', '.join(schema_policy.MODES)}")
    if subject is not None:
        subject = subject.strip()
        if len(subject) > schema_policy.SUBJECT_LENGTH_MAX:
            raise InvalidArgumentError(
                f"a subject has at most {schema_policy.SUBJECT_LENGTH_MAX} characters"
            )
        row.value_subject = (
            "" if subject == schema_policy.default_subject(row.scope.name, row.name) else subject
        )
    if enforcement is not None:
        row.schema_enforcement = enforcement
    Stream.objects.filter(pk=row.pk).update(
        value_subject=row.value_subject, schema_enforcement=row.schema_enforcement
    )
    return row
