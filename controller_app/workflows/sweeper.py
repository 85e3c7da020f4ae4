"""The sweeper: re-sends the task of every workflow left half-way.

A workflow records its intent before its task is sent; if the task is lost (the sender died
between the commit and the send) or its worker died, the intent stays in the database. The
sweeper, run by Celery beat, finds each such intent and sends its task again. Every step
checks its state, so a task that was only late does nothing twice.
"""

from __future__ import annotations

from controller_app import dispatch
from controller_app.choices import StreamState, TxnState
from controller_app.models import Stream, Transaction

#: The task that carries on a stream found in each state.
_RESUME = {
    StreamState.CREATING: dispatch.CREATE_STREAM,
    StreamState.SEALING: dispatch.SEAL_STREAM,
    StreamState.DELETING: dispatch.DELETE_STREAM,
    StreamState.SCALING: dispatch.SCALE_STREAM,
    StreamState.TRUNCATING: dispatch.TRUNCATE_STREAM,
    StreamState.COMMITTING_TXN: dispatch.COMMIT_TRANSACTIONS,
}


def half_done_work() -> list[tuple[str, int]]:
    """(task name, id) of every workflow whose intent is recorded and not yet carried out."""
    work = []
    busy = Stream.objects.exclude(state__in=[StreamState.ACTIVE, StreamState.SEALED])
    for stream_id, state in busy.values_list("pk", "state"):
        task = _RESUME.get(state)  # type: ignore[call-overload]  # (a state is its text)
        if task is not None:
            work.append((task, stream_id))
    committing = Transaction.objects.filter(state=TxnState.COMMITTING)
    for stream_id in sorted(set(committing.values_list("stream_id", flat=True))):
        work.append((dispatch.COMMIT_TRANSACTIONS, stream_id))
    aborting = Transaction.objects.filter(state=TxnState.ABORTING).values_list("pk", flat=True)
    work.extend((dispatch.ABORT_TRANSACTION, txn_pk) for txn_pk in aborting)
    return work


def sweep() -> int:
    """Send the task of every half-done workflow again; how many were sent."""
    work = half_done_work()
    for task, record_id in work:
        dispatch.send(task, record_id)
    return len(work)
