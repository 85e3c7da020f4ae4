"""Stream transactions: create, ping, commit, abort, state; and the commit and abort steps.

A transaction of epoch *e* has one shadow segment per segment of *e*
(``<segment>#transaction.<32 hex id>``), created with it. Commit records the intent (OPEN →
COMMITTING with the stream's next commit order) and sends the commit task; the task takes the
stream ACTIVE → COMMITTING_TXN, commits the COMMITTING transactions of the lowest epoch in
commit order, then the next epoch's, and returns the stream to ACTIVE. A transaction whose
epoch is still current is merged into its parent segments (atomic per segment in the segment
store). One whose epoch has been scaled away is committed by **rolling** (Pravega's rolling
transactions): epoch *c+1* duplicates the transaction's epoch and receives the merges, then is
sealed; epoch *c+2* duplicates the current epoch *c*. Readers meet the committed events after
everything written before the commit, in the right key ranges.

Abort: OPEN → ABORTING, then the abort task deletes the shadow segments. Both end with the
row moved to ``CompletedTransaction`` (COMMITTED / ABORTED), which answers late calls until
the cleanup job removes it. Leases: a transaction not pinged within its lease, or older than
its maximum execution time, is aborted by the timeout job.
"""

from __future__ import annotations

import datetime as dt
import secrets
import uuid
from collections.abc import Iterable, Sequence

from django.db import IntegrityError, transaction
from django.utils import timezone

from controller_app import dispatch
from controller_app import selectors as sel
from controller_app.choices import StreamState, TxnState
from controller_app.errors import (
    ConflictError,
    InvalidArgumentError,
    PreconditionFailedError,
    TransactionNotFoundError,
)
from controller_app.models import (
    CompletedTransaction,
    Epoch,
    SegmentRecord,
    Stream,
    Transaction,
    transition,
)
from controller_app.ports import SegmentStorePort
from controller_app.segments import Segment, encode_segments
from controller_app.workflows.common import get_stream, now_ms, step, wait_until
from millrace.kernel import defaults
from millrace.kernel.naming import (
    SEGMENT_NUMBER_BITS,
    segment_epoch,
    segment_number,
    transaction_segment_name,
)

_S, _T = StreamState, TxnState
_MASK64 = (1 << 64) - 1

MAX_EXECUTION = dt.timedelta(hours=24)
#: How long a completed transaction's outcome is kept for late callers.
COMPLETED_KEPT = dt.timedelta(hours=24)


class Postpone(Exception):
    """The stream is busy with another workflow: run this step again later."""


def _bits(txn_id: uuid.UUID) -> tuple[int, int]:
    value = txn_id.int
    high, low = value >> 64, value & _MASK64
    if high >= 1 << 63:
        high -= 1 << 64
    if low >= 1 << 63:
        raise TransactionNotFoundError(f"no transaction {txn_id}")  # low bits are never negative
    return high, low


def parse_txn_id(text: str) -> uuid.UUID:
    """A transaction id from its text; ``InvalidArgumentError`` for anything else."""
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InvalidArgumentError(f"not a transaction id: {text!r}") from None


def transaction_uuid(txn: Transaction | CompletedTransaction) -> uuid.UUID:
    return uuid.UUID(int=((txn.high_bits & _MASK64) << 64) | (txn.low_bits & _MASK64))


def shadow_name(parent: str, txn: Transaction) -> str:
    return transaction_segment_name(parent, txn.hex)


def _find(stream: Stream, txn_id: uuid.UUID) -> Transaction:
    high, low = _bits(txn_id)
    txn = Transaction.objects.filter(stream=stream, high_bits=high, low_bits=low).first()
    if txn is None:
        done = CompletedTransaction.objects.filter(
            stream=stream, high_bits=high, low_bits=low
        ).first()
        if done is not None:
            raise PreconditionFailedError(f"transaction {txn_id} is {done.state.lower()}")
        raise TransactionNotFoundError(f"stream {stream} has no transaction {txn_id}")
    return txn


def _finished(stream: Stream, txn_id: uuid.UUID, wanted: str) -> Transaction | None:
    """For a completed transaction: its outcome if it is ``wanted`` (asking again is fine),
    else ``PreconditionFailedError``; ``None`` while it is not completed."""
    high, low = _bits(txn_id)
    done = CompletedTransaction.objects.filter(stream=stream, high_bits=high, low_bits=low).first()
    if done is None:
        return None
    if done.state != wanted:
        raise PreconditionFailedError(f"transaction {txn_id} was {done.state.lower()}")
    return Transaction(stream=stream, high_bits=high, low_bits=low, state=wanted)


def _live_or_finished(stream: Stream, txn_id: uuid.UUID, wanted: str) -> Transaction:
    """The transaction, or its outcome if it completed as ``wanted`` (``_finished``). The
    completed records are looked at again after the live ones: a worker may move it there
    between the two lookups (found neither way before, it was "is committed" to a second
    commit)."""
    finished = _finished(stream, txn_id, wanted)
    if finished is not None:
        return finished
    try:
        return _find(stream, txn_id)
    except PreconditionFailedError:
        finished = _finished(stream, txn_id, wanted)
        if finished is not None:
            return finished
        raise


def _check_lease(lease_ms: int) -> int:
    low, high = defaults.TRANSACTION_LEASE_MS_MIN, defaults.TRANSACTION_LEASE_MS_MAX
    if not low <= int(lease_ms) <= high:
        raise InvalidArgumentError(f"lease must be between {low} and {high} ms")
    return int(lease_ms)


# -- create, ping, state -------------------------------------------------------------------------


def create_transaction(
    store: SegmentStorePort,
    scope: str,
    name: str,
    *,
    lease_ms: int = defaults.TRANSACTION_LEASE_MS,
    writer_id: str = "",
) -> Transaction:
    """Open a transaction on the current epoch and create its shadow segments."""
    lease = _check_lease(lease_ms)
    stream = get_stream(scope, name)
    if stream.state in (_S.CREATING, _S.SEALING, _S.SEALED, _S.DELETING):
        raise PreconditionFailedError(f"stream {scope}/{name} is {stream.state.lower()}")
    epoch = sel.current_epoch(stream)
    now = timezone.now()
    txn = Transaction.objects.create(
        stream=stream,
        high_bits=(epoch.epoch << SEGMENT_NUMBER_BITS) | secrets.randbits(31),
        low_bits=secrets.randbits(63),
        epoch=epoch.epoch,
        writer_id=str(writer_id)[:64],
        lease_expires_at=now + dt.timedelta(milliseconds=lease),
        max_execution_deadline=now + MAX_EXECUTION,
    )
    try:
        store.create_all(
            [shadow_name(sel.segment_name(stream, s.id), txn) for s in epoch.segment_list()]
        )
    except Exception:
        Transaction.objects.filter(pk=txn.pk).delete()
        raise
    return txn


def ping_transaction(scope: str, name: str, txn_id: uuid.UUID, lease_ms: int) -> Transaction:
    """Extend an open transaction's lease by ``lease_ms`` from now."""
    lease = _check_lease(lease_ms)
    txn = _find(get_stream(scope, name), txn_id)
    if txn.state != _T.OPEN:
        raise PreconditionFailedError(f"transaction {txn_id} is {txn.state.lower()}")
    expires = min(timezone.now() + dt.timedelta(milliseconds=lease), txn.max_execution_deadline)
    try:
        return transition(txn, _T.OPEN, _T.OPEN, lease_expires_at=expires)
    except ConflictError:
        return ping_transaction(scope, name, txn_id, lease_ms)


def open_transaction(scope: str, name: str, txn_id: uuid.UUID) -> Transaction | None:
    """The transaction if it is OPEN (to write to it from another client), else ``None``."""
    stream = get_stream(scope, name)
    high, low = _bits(txn_id)
    return Transaction.objects.filter(
        stream=stream, high_bits=high, low_bits=low, state=_T.OPEN
    ).first()


def transaction_state(scope: str, name: str, txn_id: uuid.UUID) -> str:
    """OPEN, COMMITTING, COMMITTED, ABORTING or ABORTED."""
    stream = get_stream(scope, name)
    high, low = _bits(txn_id)
    for model in (Transaction, CompletedTransaction):
        row = model.objects.filter(stream=stream, high_bits=high, low_bits=low).first()
        if row is not None:
            return str(row.state)
    raise TransactionNotFoundError(f"stream {scope}/{name} has no transaction {txn_id}")


# -- commit ------------------------------------------------------------------------------------


def commit_transaction(
    scope: str,
    name: str,
    txn_id: uuid.UUID,
    *,
    writer_id: str = "",
    timestamp: int | None = None,
    wait: float | None = None,
) -> Transaction:
    """Commit: its events appear in the stream atomically. Returns once COMMITTING (or, with
    ``wait``, COMMITTED). Committing a committed transaction again is fine."""
    return commit_transactions(scope, name, [txn_id], timestamp=timestamp, wait=wait)[0]


def commit_transactions(
    scope: str,
    name: str,
    txn_ids: Sequence[uuid.UUID],
    *,
    timestamp: int | None = None,
    wait: float | None = None,
) -> list[Transaction]:
    """Commit several transactions of one stream at once (a Spark job's tasks'), in the order
    given: all of them are marked COMMITTING in one database transaction or, if one cannot be
    committed (aborted, timed out, unknown), none is and the error names it. One workflow run
    then commits them together. Returns them once all are COMMITTING (or, with ``wait``,
    COMMITTED). Committing committed ones again is fine."""
    stream = get_stream(scope, name)
    txns = []
    with transaction.atomic():
        for txn_id in txn_ids:
            txn = _live_or_finished(stream, txn_id, _T.COMMITTED)
            if txn.state == _T.OPEN:
                txn = _mark_committing(stream, txn, timestamp)
            elif txn.state not in (_T.COMMITTING, _T.COMMITTED):
                raise PreconditionFailedError(f"transaction {txn_id} is {txn.state.lower()}")
            txns.append(txn)
    pending = [t for t in txns if t.state != _T.COMMITTED]  # (finished, or not yet moved)
    if not pending:
        return txns
    dispatch.send_on_commit(dispatch.COMMIT_TRANSACTIONS, stream.pk)
    if wait is None:
        return txns
    wait_until(
        lambda: not _still_committing(stream, pending),
        wait,
        f"commit of transaction {transaction_uuid(pending[0])}"
        + (f" and {len(pending) - 1} more" if len(pending) > 1 else ""),
    )
    for txn in pending:
        txn.state = _T.COMMITTED
    return txns


def _still_committing(stream: Stream, txns: Sequence[Transaction]) -> bool:
    """Whether any of ``txns`` is still being committed (one query: a committed one is marked
    COMMITTED or moved to the completed records)."""
    ids = {(t.high_bits, t.low_bits) for t in txns}
    live = Transaction.objects.filter(stream=stream, low_bits__in=[low for _, low in ids])
    pending = live.exclude(state=_T.COMMITTED).values_list("high_bits", "low_bits")
    return any(key in ids for key in pending)


def _mark_committing(stream: Stream, txn: Transaction, timestamp: int | None) -> Transaction:
    for _ in range(10):
        last = (
            Transaction.objects.filter(stream=stream, commit_order__isnull=False)
            .order_by("-commit_order")
            .values_list("commit_order", flat=True)
            .first()
        )
        try:
            with transaction.atomic():
                return transition(
                    txn, _T.OPEN, _T.COMMITTING,
                    commit_order=(last or 0) + 1, commit_timestamp=timestamp,
                )  # fmt: skip
        except IntegrityError:  # another commit took that order number: take the next
            continue
        except ConflictError:
            txn = Transaction.objects.get(pk=txn.pk)
            if txn.state == _T.COMMITTING:
                return txn
            if txn.state != _T.OPEN:
                raise PreconditionFailedError(
                    f"transaction {txn.hex} is {txn.state.lower()}"
                ) from None
    raise ConflictError(f"too many concurrent commits on stream {stream}; try again")


def run_commits(store: SegmentStorePort, stream_id: int) -> None:
    """Task step: commit every COMMITTING transaction of the stream (raises ``Postpone``
    while another workflow holds the stream)."""
    stream = Stream.objects.select_related("scope").filter(pk=stream_id).first()
    if stream is None:
        return
    pending = Transaction.objects.filter(stream=stream, state=_T.COMMITTING)
    if stream.state == _S.ACTIVE:
        if not pending.exists():
            return
        try:
            stream = transition(stream, _S.ACTIVE, _S.COMMITTING_TXN)
        except ConflictError:
            raise Postpone(f"stream {stream} changed; try again") from None
    elif stream.state != _S.COMMITTING_TXN:
        if stream.state in (_S.SEALED, _S.DELETING):
            return
        raise Postpone(f"stream {stream} is {stream.state.lower()}")
    while True:
        batch = list(pending.order_by("epoch", "commit_order"))
        if not batch:
            break
        epoch = batch[0].epoch
        group = [t for t in batch if t.epoch == epoch]
        if epoch == stream.current_epoch:
            _merge_in_place(store, stream, group)
        else:
            stream = _roll(store, stream, epoch, group)
    transition(stream, _S.COMMITTING_TXN, _S.ACTIVE)


def _merge_in_place(store: SegmentStorePort, stream: Stream, group: list[Transaction]) -> None:
    """Merge each transaction in commit order, its shadows into their parents side by side;
    a transaction is complete once all of its merges are."""
    segments = sel.epoch_record(stream, group[0].epoch).segment_list()
    parents = [sel.segment_name(stream, segment.id) for segment in segments]
    for txn in group:
        store.merge_all([(parent, shadow_name(parent, txn)) for parent in parents])
        step("commit.merge")
        _complete(txn, _T.COMMITTED)


def _roll(
    store: SegmentStorePort, stream: Stream, txn_epoch: int, group: list[Transaction]
) -> Stream:
    """Commit ``group`` (of a scaled-away epoch) by rolling: see the module docstring."""
    current = stream.current_epoch
    rolled, duplicate = current + 1, current + 2
    created = max(now_ms(), sel.current_epoch(stream).creation_time)
    old = sel.epoch_record(stream, txn_epoch).segment_list()
    tail = sel.epoch_record(stream, current).segment_list()
    dup_old = [Segment(s.number, rolled, s.key_start, s.key_end, created) for s in old]
    dup_tail = [Segment(s.number, duplicate, s.key_start, s.key_end, created) for s in tail]
    for source, copy in zip(old, dup_old, strict=True):
        target = sel.segment_name(stream, copy.id)
        store.create_segment(target)
        parent = sel.segment_name(stream, source.id)
        for txn in group:
            store.merge(target, shadow_name(parent, txn))
    step("commit.roll.merge")
    sizes_rolled = {s.id: store.seal(sel.segment_name(stream, s.id)) for s in dup_old}
    store.create_all([sel.segment_name(stream, segment.id) for segment in dup_tail])
    sizes_tail = {s.id: store.seal(sel.segment_name(stream, s.id)) for s in tail}
    step("commit.roll.seal")
    with transaction.atomic():
        for epoch, reference, segments in (
            (rolled, txn_epoch, dup_old),
            (duplicate, current, dup_tail),
        ):
            Epoch.objects.create(
                stream=stream, epoch=epoch, reference_epoch=reference, creation_time=created,
                segments=encode_segments(segments),
            )  # fmt: skip
        _records(stream, dup_old, sealing_epoch=duplicate, sizes=sizes_rolled)
        _records(stream, dup_tail)
        for sid, size in sizes_tail.items():
            SegmentRecord.objects.filter(
                stream=stream, creation_epoch=segment_epoch(sid), number=segment_number(sid)
            ).update(sealing_epoch=rolled, sealed_size=size)
        stream = transition(stream, _S.COMMITTING_TXN, _S.COMMITTING_TXN, current_epoch=duplicate)
        for txn in group:
            _complete(txn, _T.COMMITTED)
    return stream


def _records(
    stream: Stream,
    segments: Iterable[Segment],
    *,
    sealing_epoch: int | None = None,
    sizes: dict[int, int] | None = None,
) -> None:
    SegmentRecord.objects.bulk_create(
        SegmentRecord(
            stream=stream, number=s.number, creation_epoch=s.creation_epoch,
            key_start=s.key_start, key_end=s.key_end, creation_time=s.creation_time,
            sealing_epoch=sealing_epoch, sealed_size=(sizes or {}).get(s.id),
        )
        for s in segments
    )  # fmt: skip


def _complete(txn: Transaction, state: str) -> None:
    """Move ``txn`` to the completed records (idempotent)."""
    with transaction.atomic():
        deleted, _ = Transaction.objects.filter(pk=txn.pk).delete()
        if deleted:
            CompletedTransaction.objects.get_or_create(
                stream_id=txn.stream_id, high_bits=txn.high_bits, low_bits=txn.low_bits,
                defaults={"state": state, "completed_at": timezone.now()},
            )  # fmt: skip


# -- abort -------------------------------------------------------------------------------------


def abort_transaction(
    scope: str, name: str, txn_id: uuid.UUID, *, wait: float | None = None
) -> Transaction:
    """Abort: its events are dropped. Aborting an aborted transaction again is fine."""
    stream = get_stream(scope, name)
    txn = _live_or_finished(stream, txn_id, _T.ABORTED)
    if txn.state == _T.ABORTED:  # (finished, or aborted and not yet moved)
        return txn
    if txn.state == _T.OPEN:
        try:
            txn = transition(txn, _T.OPEN, _T.ABORTING)
        except ConflictError:
            return abort_transaction(scope, name, txn_id, wait=wait)
    elif txn.state != _T.ABORTING:
        raise PreconditionFailedError(f"transaction {txn_id} is {txn.state.lower()}")
    dispatch.send_on_commit(dispatch.ABORT_TRANSACTION, txn.pk)
    if wait is not None:
        wait_until(
            lambda: transaction_state(scope, name, txn_id) == _T.ABORTED,
            wait,
            f"abort of transaction {txn_id}",
        )
        txn.state = _T.ABORTED
    return txn


def run_abort(store: SegmentStorePort, txn_pk: int) -> None:
    """Task step: delete an ABORTING transaction's shadow segments and complete it."""
    txn = Transaction.objects.select_related("stream__scope").filter(pk=txn_pk).first()
    if txn is None or txn.state != _T.ABORTING:
        return
    stream = txn.stream
    for segment in sel.epoch_record(stream, txn.epoch).segment_list():
        store.delete(shadow_name(sel.segment_name(stream, segment.id), txn))
    step("abort.delete")
    _complete(txn, _T.ABORTED)


def abort_expired(limit: int = 1000) -> int:
    """Periodic: abort OPEN transactions past their lease or maximum execution time."""
    now = timezone.now()
    expired = Transaction.objects.filter(state=_T.OPEN, lease_expires_at__lt=now)[:limit]
    overdue = Transaction.objects.filter(state=_T.OPEN, max_execution_deadline__lt=now)[:limit]
    count = 0
    for txn in {t.pk: t for t in [*expired, *overdue]}.values():
        try:
            transition(txn, _T.OPEN, _T.ABORTING)
        except ConflictError:
            continue
        dispatch.send_on_commit(dispatch.ABORT_TRANSACTION, txn.pk)
        count += 1
    return count


def cleanup_completed(limit: int = 10_000) -> int:
    """Periodic: forget completed transactions older than ``COMPLETED_KEPT``."""
    old = CompletedTransaction.objects.filter(completed_at__lt=timezone.now() - COMPLETED_KEPT)
    ids = list(old.order_by("completed_at").values_list("pk", flat=True)[:limit])
    return CompletedTransaction.objects.filter(pk__in=ids).delete()[0]
