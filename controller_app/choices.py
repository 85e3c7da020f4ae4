"""States are data: every state enum beside its allowed-transitions table, and enum fields.

A transitions table maps a state to the states it may move to. ``transition()`` in
``controller_app.models.base`` is the one way to change a state: it checks the table, then
writes with a compare-and-swap on the record's version. Staying in the same state (to change
other fields under the same compare-and-swap) is always allowed.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db import models

Transitions = Mapping[str, frozenset[str]]


class StreamState(models.TextChoices):
    """Lifecycle of a stream (Pravega ``State``): one workflow at a time holds it off ACTIVE."""

    CREATING = "CREATING", "creating"
    ACTIVE = "ACTIVE", "active"
    UPDATING = "UPDATING", "updating"
    SCALING = "SCALING", "scaling"
    TRUNCATING = "TRUNCATING", "truncating"
    COMMITTING_TXN = "COMMITTING_TXN", "committing transactions"
    SEALING = "SEALING", "sealing"
    SEALED = "SEALED", "sealed"
    DELETING = "DELETING", "deleting"


_S = StreamState
STREAM_TRANSITIONS: Transitions = {
    _S.CREATING: frozenset({_S.ACTIVE}),
    _S.ACTIVE: frozenset({_S.UPDATING, _S.SCALING, _S.TRUNCATING, _S.COMMITTING_TXN, _S.SEALING}),
    _S.UPDATING: frozenset({_S.ACTIVE}),
    _S.SCALING: frozenset({_S.ACTIVE}),
    _S.TRUNCATING: frozenset({_S.ACTIVE}),
    _S.COMMITTING_TXN: frozenset({_S.ACTIVE}),
    _S.SEALING: frozenset({_S.SEALED}),
    _S.SEALED: frozenset({_S.DELETING}),
    _S.DELETING: frozenset(),  # the workflow then deletes the row
}


class TxnState(models.TextChoices):
    """Lifecycle of a stream transaction (Pravega ``TxnState``, without UNKNOWN)."""

    OPEN = "OPEN", "open"
    COMMITTING = "COMMITTING", "committing"
    COMMITTED = "COMMITTED", "committed"
    ABORTING = "ABORTING", "aborting"
    ABORTED = "ABORTED", "aborted"


_T = TxnState
TXN_TRANSITIONS: Transitions = {
    _T.OPEN: frozenset({_T.COMMITTING, _T.ABORTING}),
    _T.COMMITTING: frozenset({_T.COMMITTED}),
    _T.ABORTING: frozenset({_T.ABORTED}),
    _T.COMMITTED: frozenset(),
    _T.ABORTED: frozenset(),
}

#: Final transaction states, the ones a ``CompletedTransaction`` records.
TXN_COMPLETED = frozenset({_T.COMMITTED, _T.ABORTED})


class KvtState(models.TextChoices):
    """Lifecycle of a key-value table (Pravega's ``KVTableState``)."""

    CREATING = "CREATING", "creating"
    ACTIVE = "ACTIVE", "active"
    DELETING = "DELETING", "deleting"


KVT_TRANSITIONS: Transitions = {
    KvtState.CREATING: frozenset({KvtState.ACTIVE}),
    KvtState.ACTIVE: frozenset({KvtState.DELETING}),
    KvtState.DELETING: frozenset(),  # the workflow then deletes the row
}


class ReaderGroupState(models.TextChoices):
    """Lifecycle of a reader group's controller record (Pravega ``ReaderGroupState``)."""

    CREATING = "CREATING", "creating"
    ACTIVE = "ACTIVE", "active"
    UPDATING = "UPDATING", "updating"
    DELETING = "DELETING", "deleting"


_R = ReaderGroupState
READER_GROUP_TRANSITIONS: Transitions = {
    _R.CREATING: frozenset({_R.ACTIVE}),
    _R.ACTIVE: frozenset({_R.UPDATING, _R.DELETING}),
    _R.UPDATING: frozenset({_R.ACTIVE}),
    _R.DELETING: frozenset(),
}


class EpochTransitionState(models.TextChoices):
    """A scale: intent recorded, then started, then completed (or rejected as invalid)."""

    REQUESTED = "REQUESTED", "requested"
    STARTED = "STARTED", "started"
    COMPLETED = "COMPLETED", "completed"
    REJECTED = "REJECTED", "rejected"


_E = EpochTransitionState
EPOCH_TRANSITION_TRANSITIONS: Transitions = {
    _E.REQUESTED: frozenset({_E.STARTED, _E.REJECTED}),
    _E.STARTED: frozenset({_E.COMPLETED, _E.REJECTED}),
    _E.COMPLETED: frozenset(),
    _E.REJECTED: frozenset(),
}

#: Epoch transitions still in progress: at most one per stream.
EPOCH_TRANSITION_PENDING = frozenset({_E.REQUESTED, _E.STARTED})


class ScalingPolicyType(models.TextChoices):
    """Pravega ``ScalingPolicy.ScalingPolicyType`` (REST names)."""

    FIXED_NUM_SEGMENTS = "FIXED_NUM_SEGMENTS", "fixed number of segments"
    BY_RATE_IN_KBYTES_PER_SEC = "BY_RATE_IN_KBYTES_PER_SEC", "by rate in KiB/s"
    BY_RATE_IN_EVENTS_PER_SEC = "BY_RATE_IN_EVENTS_PER_SEC", "by rate in events/s"


class SchemaEnforcement(models.TextChoices):
    """How a stream's appends are held to its value subject (``millrace.kernel.schema_policy``)."""

    NONE = "none", "none: appends are not looked at"
    HEADER = "header", "header: every event starts with a schema id of the subject"
    VALIDATE = "validate", "validate: and decodes with that schema"


class RetentionPolicyType(models.TextChoices):
    """Pravega ``RetentionPolicy.RetentionPolicyType``: none, by time (ms) or by size (bytes)."""

    NONE = "NONE", "none"
    TIME = "TIME", "by time (ms)"
    SIZE = "SIZE", "by size (bytes)"


class SessionState(models.TextChoices):
    """How a node belongs to the cluster (``Node.session``)."""

    STATIC = "static", "static"
    LIVE = "live", "live"
    LEFT = "left", "left"


class NodeRole(models.TextChoices):
    """What a node runs."""

    CONTROLLER = "CONTROLLER", "controller"
    SEGMENT_STORE = "SEGMENT_STORE", "segment store"
    BOTH = "BOTH", "controller and segment store"


class BucketService(models.TextChoices):
    """Periodic services spread over stream buckets (Pravega ``BucketType``)."""

    RETENTION = "RETENTION", "retention"
    WATERMARKING = "WATERMARKING", "watermarking"


def is_allowed(table: Transitions, from_state: str, to_state: str) -> bool:
    """Whether ``table`` lets a record move from ``from_state`` to ``to_state``."""
    return from_state == to_state or to_state in table.get(from_state, frozenset())
