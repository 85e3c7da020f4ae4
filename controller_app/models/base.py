"""The compare-and-swap state helper shared by every record that has a lifecycle.

A model with a lifecycle subclasses ``StatefulModel`` (a ``state`` and a ``version`` column)
and names its transitions table. ``transition()`` is the only code that changes ``state``:

    transition(stream, [StreamState.ACTIVE], StreamState.SCALING)
    transition(stream, [StreamState.SCALING], StreamState.ACTIVE, current_epoch=7)

It checks the table (``IllegalTransitionError``), then runs one
``UPDATE ... SET state, version = version + 1, <changes> WHERE pk AND version AND state`` and
raises ``ConflictError`` when no row matched (someone else changed the record since it was
read). On success the instance carries the new state, version and changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, TypeVar

from django.db import models
from django.db.models import F
from django.db.models.expressions import Combinable

from controller_app.choices import Transitions, is_allowed
from controller_app.errors import ConflictError, IllegalTransitionError


class StatefulModel(models.Model):
    """Abstract base: a ``state`` (subclasses give its choices) and a CAS ``version``."""

    #: The allowed-transitions table of ``state`` (from ``controller_app.choices``).
    TRANSITIONS: ClassVar[Transitions] = {}

    version = models.BigIntegerField(
        default=0, help_text="Bumped by every change; compare-and-swap key."
    )

    class Meta:
        abstract = True


M = TypeVar("M", bound=StatefulModel)


def transition(obj: M, from_states: Iterable[str] | str, to_state: str, **changes: Any) -> M:
    """Move ``obj`` from one of ``from_states`` to ``to_state``, atomically, with ``changes``.

    Raises ``IllegalTransitionError`` when ``obj`` (as read) is not in ``from_states`` or the
    transitions table forbids a move, and ``ConflictError`` when the stored row no longer has
    the version (or a state among ``from_states``) that ``obj`` was read with.
    """
    expected = frozenset([from_states] if isinstance(from_states, str) else from_states)
    label = _label(obj)
    if obj.state not in expected:  # type: ignore[attr-defined]
        raise IllegalTransitionError(
            f"{label} is {obj.state}; moving to {to_state} "  # type: ignore[attr-defined]
            f"expects {' or '.join(sorted(expected))}"
        )
    forbidden = sorted(s for s in expected if not is_allowed(obj.TRANSITIONS, s, to_state))
    if forbidden:
        raise IllegalTransitionError(
            f"{label}: {', '.join(forbidden)} → {to_state} is not an allowed transition"
        )
    model = type(obj)
    matched = model._default_manager.filter(
        pk=obj.pk, version=obj.version, state__in=expected
    ).update(state=to_state, version=F("version") + 1, **changes)
    if matched != 1:
        raise ConflictError(
            f"{label} changed since it was read at version {obj.version}; re-read it and retry"
        )
    obj.state = to_state  # type: ignore[attr-defined]
    obj.version += 1
    computed = [name for name, value in changes.items() if isinstance(value, Combinable)]
    for name, value in changes.items():
        if name not in computed:
            setattr(obj, name, value)
    if computed:
        obj.refresh_from_db(fields=computed)
    return obj


def _label(obj: models.Model) -> str:
    return f"{obj._meta.verbose_name} {obj}"
