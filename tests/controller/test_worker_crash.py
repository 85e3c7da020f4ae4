"""The Celery worker killed with SIGKILL at each named step of each workflow; work completes.

Each case starts a real ``millrace worker`` with the TEST-ONLY ``MILLRACE_TEST_CRASH_AT`` set
to one step: the worker kills itself (SIGKILL) right after that step. The test then starts a
normal worker, runs the sweeper (as Celery beat would, every 30 s) to re-send the task whose
message died with the worker, waits for the workflow to finish, and checks that the stream
ends ACTIVE or SEALED (or deleted, for delete), that the expected result is there, and that
the invariant checker passes. A last case delivers the same task twice at once to a worker
with four threads.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from controller_app import selectors as sel
from controller_app import tasks
from controller_app.choices import StreamState, TxnState
from controller_app.models import Stream
from controller_app.segment_client import segment_store
from controller_app.workflows import scale, scopes, streams, transactions, truncate
from controller_app.workflows.config import StreamConfig
from tests.controller.conftest import write_events
from tests.controller.invariants import check_stream

pytestmark = pytest.mark.django_db(transaction=True)
DONE_TIMEOUT_SECONDS = 60.0


class Case:
    """A stream prepared for one workflow, the request, and what "done" looks like."""

    def __init__(self, port: int) -> None:
        self.scope = f"sc{uuid.uuid4().hex[:12]}"
        scopes.create_scope(self.scope)
        self.stream = streams.create_stream(
            segment_store(), self.scope, "st", StreamConfig(min_segments=2)
        )
        self.port = port
        self.txn: Any = None

    def refresh(self) -> Stream | None:
        return Stream.objects.select_related("scope").filter(pk=self.stream.pk).first()

    def write(self, segment: str, payload: bytes) -> None:
        write_events(self.port, segment, payload)

    def open_txn(self, payload: bytes) -> None:
        self.txn = transactions.create_transaction(
            segment_store(), self.scope, "st", lease_ms=60_000
        )
        for segment in sel.epoch_record(self.stream, self.txn.epoch).segment_list():
            parent = sel.segment_name(self.stream, segment.id)
            self.write(transactions.shadow_name(parent, self.txn), payload)


def _scale(case: Case) -> Callable[[], bool]:
    high = sel.current_segments(case.stream)[1]
    scale.scale_stream(case.scope, "st", [high.id], [(0.5, 0.75), (0.75, 1.0)], wait=None)
    return lambda: (
        (s := case.refresh()) is not None and s.state == "ACTIVE" and s.current_epoch == 1
    )


def _truncate(case: Case) -> Callable[[], bool]:
    low, high = sel.current_segments(case.stream)
    case.write(sel.segment_name(case.stream, low.id), b"x" * 12)
    truncate.truncate_stream(segment_store(), case.scope, "st", {low.id: 20, high.id: 0}, wait=None)

    def done() -> bool:
        stream = case.refresh()
        name = sel.segment_name(case.stream, low.id)
        return stream.state == "ACTIVE" and segment_store().info(name).start_offset == 20

    return done


def _seal(case: Case) -> Callable[[], bool]:
    streams.seal_stream(case.scope, "st", wait=None)
    return lambda: case.refresh().state == StreamState.SEALED


def _delete(case: Case) -> Callable[[], bool]:
    streams.seal_stream(case.scope, "st", wait=30)  # the worker seals (it dies at delete)
    streams.delete_stream(case.scope, "st", wait=None)
    return lambda: case.refresh() is None


def _commit(case: Case) -> Callable[[], bool]:
    case.open_txn(b"committed")
    txn_id = transactions.transaction_uuid(case.txn)
    transactions.commit_transaction(case.scope, "st", txn_id)
    return lambda: transactions.transaction_state(case.scope, "st", txn_id) == TxnState.COMMITTED


def _rolling_commit(case: Case) -> Callable[[], bool]:
    case.open_txn(b"rolled")
    high = sel.current_segments(case.stream)[1]
    scale.scale_stream(case.scope, "st", [high.id], [(0.5, 1.0)], wait=30)  # dies at the roll
    return _commit_only(case)


def _commit_only(case: Case) -> Callable[[], bool]:
    txn_id = transactions.transaction_uuid(case.txn)
    transactions.commit_transaction(case.scope, "st", txn_id)
    return lambda: transactions.transaction_state(case.scope, "st", txn_id) == TxnState.COMMITTED


def _abort(case: Case) -> Callable[[], bool]:
    case.open_txn(b"aborted")
    txn_id = transactions.transaction_uuid(case.txn)
    transactions.abort_transaction(case.scope, "st", txn_id)
    return lambda: transactions.transaction_state(case.scope, "st", txn_id) == TxnState.ABORTED


CASES = [
    ("scale.create", _scale),
    ("scale.seal", _scale),
    ("scale.complete", _scale),
    ("truncate.delete", _truncate),
    ("truncate.segments", _truncate),
    ("seal.segment", _seal),
    ("delete.segments", _delete),
    ("commit.merge", _commit),
    ("commit.roll.merge", _rolling_commit),
    ("commit.roll.seal", _rolling_commit),
    ("abort.delete", _abort),
]


def _wait(done: Callable[[], bool], worker: Any, what: str) -> None:
    deadline = time.monotonic() + DONE_TIMEOUT_SECONDS
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not finish; worker log:\n{worker.output()[-4000:]}")
        time.sleep(0.1)


def _check(case: Case) -> None:
    # A commit marks its transactions COMMITTED (what ``done`` sees) a step before it returns
    # the stream to ACTIVE: give the workflow that last step, then demand a settled stream.
    deadline = time.monotonic() + DONE_TIMEOUT_SECONDS
    stream = case.refresh()
    while stream is not None and stream.state not in (StreamState.ACTIVE, StreamState.SEALED):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
        stream = case.refresh()
    if stream is None:
        return  # deleted: nothing of it may remain (checked by the delete case itself)
    assert stream.state in (StreamState.ACTIVE, StreamState.SEALED)
    assert check_stream(stream) == []


@pytest.mark.parametrize(("step", "prepare"), CASES, ids=[c[0] for c in CASES])
def test_worker_killed_after_each_step_completes_after_restart(
    live_worker: Any,
    registered_node: Any,
    step: str,
    prepare: Callable[[Case], Callable[[], bool]],
) -> None:
    live_worker.kill()
    live_worker.start(crash_at=step)
    case = Case(registered_node.port)
    names = [sel.segment_name(case.stream, s.id) for s in sel.current_segments(case.stream)]
    done = prepare(case)
    live_worker.wait_dead()
    assert live_worker.process.returncode == -signal.SIGKILL, live_worker.output()[-3000:]
    if not step.endswith(".complete"):  # killed before the last step: not done yet
        assert not done()
    live_worker.start()
    tasks.sweep()
    _wait(done, live_worker, step)
    _check(case)
    if step.startswith("delete"):
        assert not any(segment_store().info(name).exists for name in names)


def test_the_same_task_twice_at_once(live_worker: Any, registered_node: Any) -> None:
    live_worker.kill()
    live_worker.start(concurrency=4)
    case = Case(registered_node.port)
    case.open_txn(b"once")
    high = sel.current_segments(case.stream)[1]
    scale.scale_stream(case.scope, "st", [high.id], [(0.5, 0.75), (0.75, 1.0)], wait=None)
    for _ in range(2):
        tasks.scale_stream.delay(case.stream.pk)
    _wait(lambda: case.refresh().state == StreamState.ACTIVE, live_worker, "scale")
    txn_id = transactions.transaction_uuid(case.txn)
    transactions.commit_transaction(case.scope, "st", txn_id)
    for _ in range(2):
        tasks.commit_transactions.delay(case.stream.pk)
    _wait(
        lambda: transactions.transaction_state(case.scope, "st", txn_id) == TxnState.COMMITTED,
        live_worker,
        "commit",
    )
    _wait(lambda: case.refresh().state == StreamState.ACTIVE, live_worker, "commit")
    _check(case)
    stream = case.refresh()
    assert stream.current_epoch == 3  # one scale, one roll: not two of either
