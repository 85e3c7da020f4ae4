"""States are data: the transitions tables, and transition()'s compare-and-swap."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from django.db.models import F

from controller_app import choices
from controller_app.choices import StreamState, TxnState
from controller_app.errors import ConflictError, IllegalTransitionError
from controller_app.models import StatefulModel, Stream, transition
from tests.controller import factories as f

pytestmark = pytest.mark.django_db

MACHINES: list[tuple[str, Callable[..., StatefulModel], type, choices.Transitions]] = [
    ("stream", f.StreamFactory, StreamState, choices.STREAM_TRANSITIONS),
    ("txn", f.TransactionFactory, TxnState, choices.TXN_TRANSITIONS),
    (
        "reader-group",
        f.ReaderGroupFactory,
        choices.ReaderGroupState,
        choices.READER_GROUP_TRANSITIONS,
    ),
    (
        "epoch-transition",
        f.EpochTransitionFactory,
        choices.EpochTransitionState,
        choices.EPOCH_TRANSITION_TRANSITIONS,
    ),
]


def _pairs(allowed: bool) -> list[tuple[str, Callable[..., StatefulModel], str, str]]:
    cases = []
    for name, factory, enum, table in MACHINES:
        for a, b in itertools.product(enum, enum):
            if a != b and (b in table[a]) == allowed:
                cases.append((name, factory, a.value, b.value))
    return cases


def test_every_state_has_a_row_in_its_table() -> None:
    for _, _, enum, table in MACHINES:
        assert set(table) == set(enum)
        assert all(targets <= set(enum) for targets in table.values())


def test_stream_lifecycle_is_pravegas() -> None:
    table = choices.STREAM_TRANSITIONS
    assert table[StreamState.CREATING] == {StreamState.ACTIVE}
    for busy in ("UPDATING", "SCALING", "TRUNCATING", "COMMITTING_TXN"):
        assert busy in table[StreamState.ACTIVE]
        assert table[StreamState(busy)] == {StreamState.ACTIVE}
    assert table[StreamState.ACTIVE] >= {StreamState.SEALING}
    assert table[StreamState.SEALING] == {StreamState.SEALED}
    assert table[StreamState.SEALED] == {StreamState.DELETING}


@pytest.mark.parametrize(("machine", "factory", "start", "end"), _pairs(allowed=True))
def test_allowed_transition(
    machine: str, factory: Callable[..., StatefulModel], start: str, end: str
) -> None:
    obj = factory(state=start)
    transition(obj, [start], end)
    assert (obj.state, obj.version) == (end, 1)
    obj.refresh_from_db()
    assert (obj.state, obj.version) == (end, 1)


@pytest.mark.parametrize(("machine", "factory", "start", "end"), _pairs(allowed=False))
def test_disallowed_transition(
    machine: str, factory: Callable[..., StatefulModel], start: str, end: str
) -> None:
    obj = factory(state=start)
    with pytest.raises(IllegalTransitionError, match="not an allowed transition"):
        transition(obj, [start], end)
    obj.refresh_from_db()
    assert (obj.state, obj.version) == (start, 0)


def test_record_not_in_the_expected_state() -> None:
    stream = f.StreamFactory(state=StreamState.SEALED)
    with pytest.raises(IllegalTransitionError, match="is SEALED; moving to SCALING expects ACTIVE"):
        transition(stream, StreamState.ACTIVE, StreamState.SCALING)


def test_lost_race_raises_conflict_and_overwrites_nothing() -> None:
    created = f.StreamFactory()
    first = Stream.objects.get(pk=created.pk)
    second = Stream.objects.get(pk=created.pk)
    assert first.version == second.version == 0
    transition(first, [StreamState.ACTIVE], StreamState.SCALING)
    with pytest.raises(ConflictError, match="changed since it was read at version 0"):
        transition(second, [StreamState.ACTIVE], StreamState.UPDATING, min_segments=9)
    stored = Stream.objects.get(pk=created.pk)
    assert (stored.state, stored.version, stored.min_segments) == (StreamState.SCALING, 1, 1)


def test_same_version_with_another_state_is_a_conflict_too() -> None:
    """A CAS on version alone would do; the state is also checked in the UPDATE."""
    stream = f.StreamFactory()
    Stream.objects.filter(pk=stream.pk).update(state=StreamState.SEALED)  # version unchanged
    with pytest.raises(ConflictError):
        transition(stream, [StreamState.ACTIVE], StreamState.SCALING)


def test_changes_ride_along_and_expressions_are_reread() -> None:
    stream = f.StreamFactory(state=StreamState.SCALING, current_epoch=4)
    transition(
        stream, [StreamState.SCALING], StreamState.ACTIVE, current_epoch=F("current_epoch") + 1
    )
    assert (stream.state, stream.current_epoch, stream.version) == ("ACTIVE", 5, 1)
    transition(
        stream, StreamState.ACTIVE, StreamState.ACTIVE, min_segments=3
    )  # same state: CAS only
    stored = Stream.objects.get(pk=stream.pk)
    assert (stored.current_epoch, stored.min_segments, stored.version) == (5, 3, 2)


def test_stale_copy_then_retry_after_reread_succeeds() -> None:
    stream = f.StreamFactory()
    stale = Stream.objects.get(pk=stream.pk)
    transition(stream, StreamState.ACTIVE, StreamState.TRUNCATING)
    transition(stream, StreamState.TRUNCATING, StreamState.ACTIVE)
    with pytest.raises(ConflictError):
        transition(stale, StreamState.ACTIVE, StreamState.SEALING)
    stale.refresh_from_db()
    transition(stale, StreamState.ACTIVE, StreamState.SEALING)
    assert stale.version == 3
