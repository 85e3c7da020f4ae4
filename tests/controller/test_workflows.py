"""Workflows called directly, their task steps run in-process, against a real segment store.

The request functions record intent (their Celery task is sent only when the test's database
transaction commits, which it never does here), then the test runs the task step itself
(``run_seal``, ``run_scale`` ...) as the worker would, twice where that must be harmless, and
checks the stored state, the segment store and the invariant checker.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest
from django.utils import timezone

from controller_app import selectors as sel
from controller_app.choices import EpochTransitionState, StreamState, TxnState
from controller_app.errors import (
    AlreadyExistsError,
    EpochChangedError,
    InvalidArgumentError,
    InvalidStreamCutError,
    PreconditionFailedError,
    ScopeNotFoundError,
    StreamNotFoundError,
    TransactionNotFoundError,
)
from controller_app.models import CompletedTransaction, Stream, Transaction
from controller_app.segment_client import segment_store
from controller_app.workflows import scale, scopes, streams, transactions, truncate
from controller_app.workflows.config import StreamConfig
from tests.controller.invariants import check_stream

pytestmark = pytest.mark.django_db


@pytest.fixture
def sc() -> str:
    """A scope name of this test's own: the segment store outlives each test's database."""
    return f"sc{uuid.uuid4().hex[:12]}"


@pytest.fixture
def stream(registered_node, sc: str) -> Stream:
    scopes.create_scope(sc)
    return streams.create_stream(
        segment_store(), sc, "st", StreamConfig(min_segments=2, tags=("a", "b"))
    )


def _name(stream: Stream, segment_id: int) -> str:
    return sel.segment_name(stream, segment_id)


def _write(wire, segment: str, *events: bytes) -> None:
    writer = uuid.uuid4()
    wire.setup_append(segment, writer)
    wire.append_block(writer, list(events)).result(10)


def _refresh(stream: Stream) -> Stream:
    return sel.get_stream(stream.scope.name, stream.name)


# -- scopes and create ---------------------------------------------------------------------


def test_create_stream_creates_its_segments(stream: Stream) -> None:
    assert stream.state == StreamState.ACTIVE
    assert sel.stream_tags(stream) == ["a", "b"]
    segments = sel.current_segments(stream)
    assert [(s.key_start, s.key_end) for s in segments] == [(0.0, 0.5), (0.5, 1.0)]
    for segment in segments:
        info = segment_store().info(_name(stream, segment.id))
        assert info.exists and not info.sealed
    assert check_stream(stream) == []


def test_create_errors(stream: Stream, sc: str) -> None:
    with pytest.raises(AlreadyExistsError):
        streams.create_stream(
            segment_store(), sc, "st", StreamConfig(min_segments=2, tags=("a", "b"))
        )
    with pytest.raises(ScopeNotFoundError):
        streams.create_stream(segment_store(), "nosuch", "st", StreamConfig())
    with pytest.raises(InvalidArgumentError, match="letters, digits"):
        streams.create_stream(segment_store(), "sc", "bad name!", StreamConfig())
    with pytest.raises(InvalidArgumentError, match="minSegments"):
        streams.create_stream(segment_store(), "sc", "zero", StreamConfig(min_segments=0))
    with pytest.raises(AlreadyExistsError):
        scopes.create_scope(sc)
    with pytest.raises(PreconditionFailedError, match="not empty"):
        scopes.delete_scope(sc)


def test_a_half_done_create_is_finished_by_the_same_create(registered_node, sc: str) -> None:
    scopes.create_scope(sc)
    config = StreamConfig(min_segments=3)
    row = streams._insert_stream(scopes.get_scope(sc), "half", config)  # as if we crashed
    assert row.state == StreamState.CREATING
    done = streams.create_stream(segment_store(), sc, "half", config)
    assert done.state == StreamState.ACTIVE
    assert check_stream(done) == []


def test_update_replaces_configuration_and_tags(stream: Stream, sc: str) -> None:
    new = StreamConfig(
        scaling_type="BY_RATE_IN_EVENTS_PER_SEC", target_rate=100, scale_factor=2,
        min_segments=2, retention_type="SIZE", retention_value=10**9, tags=("c",),
    )  # fmt: skip
    updated = streams.update_stream(sc, "st", new)
    assert updated.state == StreamState.ACTIVE
    stored = _refresh(stream)
    assert StreamConfig.from_stream(stored, sel.stream_tags(stored)) == new


# -- seal and delete -----------------------------------------------------------------------


def test_seal_then_delete(stream: Stream, wire, sc: str) -> None:
    first = sel.current_segments(stream)[0]
    _write(wire, _name(stream, first.id), b"x" * 10)
    with pytest.raises(PreconditionFailedError, match="seal it before"):
        streams.delete_stream(sc, "st", wait=None)
    streams.seal_stream(sc, "st", wait=None)
    assert _refresh(stream).state == StreamState.SEALING
    streams.run_seal(segment_store(), stream.pk)
    streams.run_seal(segment_store(), stream.pk)  # twice: harmless
    sealed = _refresh(stream)
    assert sealed.state == StreamState.SEALED
    assert sel.current_segments(sealed) == ()
    assert sel.segment_record(sealed, first.id).sealed_size == 18  # 8-byte header + 10
    assert check_stream(sealed) == []
    with pytest.raises(PreconditionFailedError):
        scale.scale_stream(sc, "st", [first.id], [(0.0, 0.5)], wait=None)

    names = [_name(sealed, s.id) for s in sel.epoch_record(sealed, 0).segment_list()]
    streams.delete_stream(sc, "st", wait=None)
    streams.run_delete(segment_store(), stream.pk)
    streams.run_delete(segment_store(), stream.pk)
    assert not Stream.objects.filter(pk=stream.pk).exists()
    assert not any(segment_store().info(name).exists for name in names)
    with pytest.raises(StreamNotFoundError):
        streams.seal_stream(sc, "st")
    scopes.delete_scope(sc)


# -- scale ---------------------------------------------------------------------------------


def test_scale_splits_and_merges(stream: Stream, wire, sc: str) -> None:
    _low, high = sel.current_segments(stream)
    _write(wire, _name(stream, high.id), b"before")
    job = scale.scale_stream(sc, "st", [high.id], [(0.5, 0.75), (0.75, 1.0)], wait=None)
    assert _refresh(stream).state == StreamState.SCALING
    scale.run_scale(segment_store(), stream.pk)
    scale.run_scale(segment_store(), stream.pk)
    job.refresh_from_db()
    assert job.state == EpochTransitionState.COMPLETED
    scaled = _refresh(stream)
    assert (scaled.state, scaled.current_epoch) == (StreamState.ACTIVE, 1)
    ranges = [(s.key_start, s.key_end) for s in sel.current_segments(scaled)]
    assert ranges == [(0.0, 0.5), (0.5, 0.75), (0.75, 1.0)]
    assert sel.segment_record(scaled, high.id).sealed_size == 14
    successors = sel.successors(scaled, high.id)
    assert sorted(s.number for s in successors) == [2, 3]
    assert check_stream(scaled) == []

    # The sealed segment again (a caller that read the segments before the scale): conflict.
    with pytest.raises(EpochChangedError, match="no longer current"):
        scale.scale_stream(sc, "st", [high.id], [(0.5, 1.0)], wait=None)

    a, b = sel.current_segments(scaled)[1:]
    scale.scale_stream(sc, "st", [a.id, b.id], [(0.5, 1.0)], wait=None)
    scale.run_scale(segment_store(), stream.pk)
    merged = _refresh(stream)
    assert [s.number for s in sel.current_segments(merged)] == [0, 4]
    assert check_stream(merged) == []


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ([(0.5, 0.7), (0.8, 1.0)], "gap"),
        ([(0.5, 0.8), (0.7, 1.0)], "overlap"),
        ([(0.4, 1.0)], "cover exactly"),
        ([(0.5, 1.5)], "within"),
        ([], "at least one"),
    ],
)
def test_scale_rejects_ranges_that_do_not_cover_exactly(
    stream: Stream, ranges: list, message: str, sc: str
) -> None:
    high = sel.current_segments(stream)[1]
    with pytest.raises(InvalidArgumentError, match=message):
        scale.scale_stream(sc, "st", [high.id], ranges, wait=None)
    assert _refresh(stream).state == StreamState.ACTIVE


def test_scale_of_a_segment_that_is_not_current(stream: Stream, sc: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not a current segment"):
        scale.scale_stream(sc, "st", [12345], [(0.0, 1.0)], wait=None)


# -- truncate ------------------------------------------------------------------------------


def test_truncate_deletes_and_truncates_and_never_moves_back(stream: Stream, wire, sc: str) -> None:
    low, high = sel.current_segments(stream)
    _write(wire, _name(stream, low.id), b"a" * 12, b"b" * 12)  # 20 bytes per event
    _write(wire, _name(stream, high.id), b"c" * 12)
    scale.scale_stream(sc, "st", [high.id], [(0.5, 1.0)], wait=None)
    scale.run_scale(segment_store(), stream.pk)
    scaled = _refresh(stream)
    new_high = sel.current_segments(scaled)[1]
    _write(wire, _name(scaled, new_high.id), b"d" * 12)

    with pytest.raises(InvalidStreamCutError, match="beyond the end"):
        truncate.truncate_stream(
            segment_store(), sc, "st", {low.id: 400, new_high.id: 0}, wait=None
        )
    truncate.truncate_stream(segment_store(), sc, "st", {low.id: 20, new_high.id: 0}, wait=None)
    assert _refresh(stream).state == StreamState.TRUNCATING
    truncate.run_truncate(segment_store(), stream.pk)
    done = _refresh(stream)
    assert done.state == StreamState.ACTIVE
    assert segment_store().info(_name(done, low.id)).start_offset == 20
    assert not segment_store().info(_name(done, high.id)).exists  # wholly before the cut
    assert {s.id: o for s, o in sel.head_segments(done).items()} == {low.id: 20, new_high.id: 0}
    assert check_stream(done) == []
    with pytest.raises(InvalidStreamCutError, match="never moves back"):
        truncate.truncate_stream(segment_store(), sc, "st", {low.id: 0, new_high.id: 0}, wait=None)


# -- transactions --------------------------------------------------------------------------


def _txn_events(wire, stream: Stream, txn: Transaction, payload: bytes) -> None:
    for segment in sel.epoch_record(stream, txn.epoch).segment_list():
        shadow = transactions.shadow_name(_name(stream, segment.id), txn)
        _write(wire, shadow, payload)


def _bytes(wire, name: str) -> bytes:
    return wire.read_segment(name, segment_store().info(name).start_offset).data


def test_commit_merges_into_the_parents(stream: Stream, wire, sc: str) -> None:
    txn = transactions.create_transaction(
        segment_store(), sc, "st", lease_ms=10_000, writer_id="w1"
    )
    txn_id = transactions.transaction_uuid(txn)
    assert transactions.transaction_state(sc, "st", txn_id) == TxnState.OPEN
    _txn_events(wire, stream, txn, b"in-txn")
    low = sel.current_segments(stream)[0]
    _write(wire, _name(stream, low.id), b"outside")
    assert b"in-txn" not in _bytes(wire, _name(stream, low.id))  # invisible until committed
    transactions.ping_transaction(sc, "st", txn_id, 20_000)
    transactions.commit_transaction(sc, "st", txn_id)
    assert transactions.transaction_state(sc, "st", txn_id) == TxnState.COMMITTING
    transactions.run_commits(segment_store(), stream.pk)
    transactions.run_commits(segment_store(), stream.pk)
    assert transactions.transaction_state(sc, "st", txn_id) == TxnState.COMMITTED
    for segment in sel.current_segments(stream):
        assert _bytes(wire, _name(stream, segment.id)).endswith(b"in-txn")
    assert _refresh(stream).state == StreamState.ACTIVE
    transactions.commit_transaction(sc, "st", txn_id)  # again: fine
    with pytest.raises(PreconditionFailedError, match="committed"):
        transactions.abort_transaction(sc, "st", txn_id)
    assert check_stream(_refresh(stream)) == []


def test_a_transactions_merges_go_side_by_side_and_a_failed_one_again_alone(
    stream: Stream, wire, sc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``merge_all`` sends a commit's merges to the node together (all in flight at once);
    one merged already (a step run again) or failing that way is merged again one by one."""
    from millrace.client.transport.calls import SegmentCalls
    from millrace.kernel.naming import transaction_segment_name

    store = segment_store()
    parents = [_name(stream, s.id) for s in sel.current_segments(stream)]
    shadows = [transaction_segment_name(p, uuid.uuid4().hex) for p in parents]
    for parent, shadow in zip(parents, shadows, strict=True):
        store.create_segment(shadow)
        _write(wire, shadow, f"into {parent}".encode())
    store.merge(parents[0], shadows[0])  # merged already: the pass side by side fails on it
    real_merge, flight = SegmentCalls.merge, {"now": 0, "most": 0}

    async def merge(self, target: str, source: str, *, token: str | None = None) -> int:
        flight["now"] += 1
        flight["most"] = max(flight["most"], flight["now"])
        try:
            return await real_merge(self, target, source, token=token)
        finally:
            flight["now"] -= 1

    monkeypatch.setattr(SegmentCalls, "merge", merge)
    store.merge_all(list(zip(parents, shadows, strict=True)))
    assert flight["most"] == len(parents) == 2
    for parent in parents:
        assert _bytes(wire, parent).endswith(f"into {parent}".encode())  # (after its header)
    assert not any(store.info(shadow).exists for shadow in shadows)


def test_a_transactions_shadow_segments_are_created_side_by_side(
    stream: Stream, sc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from millrace.client.transport.calls import SegmentCalls

    real, flight = SegmentCalls.create_segment, {"now": 0, "most": 0}

    async def create_segment(self, segment: str, *, token: str | None = None) -> None:
        flight["now"] += 1
        flight["most"] = max(flight["most"], flight["now"])
        try:
            await real(self, segment, token=token)
        finally:
            flight["now"] -= 1

    monkeypatch.setattr(SegmentCalls, "create_segment", create_segment)
    txn = transactions.create_transaction(segment_store(), sc, "st", lease_ms=10_000)
    assert flight["most"] == len(sel.current_segments(stream)) == 2
    for segment in sel.current_segments(stream):
        assert segment_store().info(transactions.shadow_name(_name(stream, segment.id), txn)).exists


def test_a_commit_racing_the_move_to_the_completed_records_is_answered_committed(
    stream: Stream, wire, sc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second commit that looks for the transaction while the worker completes it and moves
    it to the completed records (after the first lookup there found nothing, before the
    live one) is answered committed, not "is committed" (seen by the Spark driver)."""
    txn = transactions.create_transaction(segment_store(), sc, "st", lease_ms=10_000)
    txn_id = transactions.transaction_uuid(txn)
    _txn_events(wire, stream, txn, b"raced")
    transactions.commit_transaction(sc, "st", txn_id)
    find = transactions._find

    def worker_in_between(found_in: Stream, wanted: uuid.UUID) -> Transaction:
        for _ in range(2):  # the real worker step: commit, then move to the completed records
            transactions.run_commits(segment_store(), stream.pk)
        return find(found_in, wanted)

    monkeypatch.setattr(transactions, "_find", worker_in_between)
    again = transactions.commit_transaction(sc, "st", txn_id)
    assert again.state == TxnState.COMMITTED
    assert not Transaction.objects.filter(pk=txn.pk).exists()  # it did move meanwhile


def test_abort_drops_the_events(stream: Stream, wire, sc: str) -> None:
    txn = transactions.create_transaction(segment_store(), sc, "st", lease_ms=10_000)
    txn_id = transactions.transaction_uuid(txn)
    _txn_events(wire, stream, txn, b"dropped")
    transactions.abort_transaction(sc, "st", txn_id)
    transactions.run_abort(segment_store(), txn.pk)
    assert transactions.transaction_state(sc, "st", txn_id) == TxnState.ABORTED
    for segment in sel.current_segments(stream):
        parent = _name(stream, segment.id)
        assert not segment_store().info(transactions.shadow_name(parent, txn)).exists
        assert b"dropped" not in _bytes(wire, parent)
    with pytest.raises(PreconditionFailedError, match="aborted"):
        transactions.commit_transaction(sc, "st", txn_id)
    with pytest.raises(TransactionNotFoundError):
        transactions.transaction_state(sc, "st", uuid.uuid4())


def test_commit_after_a_scale_rolls_the_transaction(stream: Stream, wire, sc: str) -> None:
    txn = transactions.create_transaction(segment_store(), sc, "st", lease_ms=10_000)
    _txn_events(wire, stream, txn, b"rolled")
    high = sel.current_segments(stream)[1]
    scale.scale_stream(sc, "st", [high.id], [(0.5, 0.75), (0.75, 1.0)], wait=None)
    scale.run_scale(segment_store(), stream.pk)
    transactions.commit_transaction(sc, "st", transactions.transaction_uuid(txn))
    transactions.run_commits(segment_store(), stream.pk)
    rolled = _refresh(stream)
    assert (rolled.state, rolled.current_epoch) == (StreamState.ACTIVE, 3)
    epochs = {e: sel.epoch_record(rolled, e) for e in (2, 3)}
    assert (epochs[2].reference_epoch, epochs[3].reference_epoch) == (0, 1)
    for segment in epochs[2].segment_list():  # duplicates of epoch 0 hold the events, sealed
        name = _name(rolled, segment.id)
        assert segment_store().info(name).sealed
        assert _bytes(wire, name).endswith(b"rolled")
    assert [s.number for s in sel.current_segments(rolled)] == [0, 2, 3]
    assert check_stream(rolled) == []


def test_auto_scaling_with_an_open_transaction_rolls_it(wire, sc: str) -> None:
    """An automatic split while a transaction is open; its commit then rolls it over (the
    same rolling transactions as a scale by hand: auto-scaling goes through the workflow)."""
    from controller_app.ports import SegmentTraffic, Traffic
    from controller_app.workflows import autoscale

    scopes.create_scope(sc)
    config = StreamConfig(
        scaling_type="BY_RATE_IN_EVENTS_PER_SEC", target_rate=100, scale_factor=2, min_segments=2
    )
    stream = streams.create_stream(segment_store(), sc, "st", config)
    txn = transactions.create_transaction(segment_store(), sc, "st", lease_ms=10_000)
    _txn_events(wire, stream, txn, b"rolled")
    high = sel.current_segments(stream)[1]
    hot = Traffic({_name(stream, high.id): SegmentTraffic(500, 50_000, 60)}, uptime_s=60)
    settings = autoscale.AutoscaleSettings(window_s=1, cooldown_s=0, mute_s=0)
    planned = autoscale.autoscale_stream(stream, hot, settings)
    assert planned is not None and planned.split and planned.sealed == [high.id]
    scale.run_scale(segment_store(), stream.pk)
    transactions.commit_transaction(sc, "st", transactions.transaction_uuid(txn))
    transactions.run_commits(segment_store(), stream.pk)
    rolled = _refresh(stream)
    assert (rolled.state, rolled.current_epoch) == (StreamState.ACTIVE, 3)
    for segment in sel.epoch_record(rolled, 2).segment_list():
        assert _bytes(wire, _name(rolled, segment.id)).endswith(b"rolled")
    assert check_stream(rolled) == []


def test_expired_leases_are_aborted(stream: Stream, sc: str) -> None:
    txn = transactions.create_transaction(segment_store(), sc, "st", lease_ms=1_000)
    Transaction.objects.filter(pk=txn.pk).update(
        lease_expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert transactions.abort_expired() == 1
    transactions.run_abort(segment_store(), txn.pk)
    assert CompletedTransaction.objects.get().state == TxnState.ABORTED
    with pytest.raises(InvalidArgumentError, match="lease"):
        transactions.create_transaction(segment_store(), sc, "st", lease_ms=10)


def test_a_scale_request_of_a_past_epoch_is_refused_at_once(stream: Stream, sc: str) -> None:
    """A rolling commit (or another scale) moved the stream to a new epoch after the request
    read its segments: the request fails with a conflict at once instead of waiting."""
    first = sel.current_segments(stream)[0]
    real = sel.get_stream
    reads: list[Stream] = []

    def moved_on(scope: str, name: str) -> Stream:
        row = real(scope, name)
        reads.append(row)
        if len(reads) > 1:  # every read after the request's first sees a later epoch
            row.current_epoch += 1
        return row

    started = time.monotonic()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sel, "get_stream", moved_on)
        with pytest.raises(EpochChangedError, match="read its current segments and ask again"):
            scale.scale_stream(sc, "st", [first.id], [(first.key_start, first.key_end)], wait=10)
    assert time.monotonic() - started < 2
    assert Stream.objects.get(pk=stream.pk).state == StreamState.ACTIVE
