"""How every face answers an error: one table, read by REST, gRPC and the console.

Each row names an error class and its ``Outcome``: the HTTP status and stable code of the REST
API, the gRPC status of Pravega's clients, and whether the same call may succeed later (a
503 with ``Retry-After`` over REST, ``UNAVAILABLE`` over gRPC, which Pravega's clients retry).
The first row whose class matches wins, so a subclass comes before its base. An error with no
row is a bug: every face logs it with its traceback and answers an internal error
(``tests/controller/test_outcomes.py`` fails when a controller error has no row).

A metadata database or broker that is away is ``controller_app.outages``' (it notes when the
database failed, and tests may switch it off); its answers are 503 and ``UNAVAILABLE`` too.
"""

from __future__ import annotations

import dataclasses

from controller_app import errors as ce
from millrace.client.transport import segment_store as ssc

__all__ = [
    "INTERNAL",
    "OUTAGES",
    "OUTCOMES",
    "SEGMENT_STORE_AWAY_SECONDS",
    "SERVICE_AWAY_SECONDS",
    "Outcome",
    "outcome_of",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """The answer to one kind of error on every face."""

    #: The REST API's HTTP status and ``code``.
    http: int
    code: str
    #: The name of the ``grpc.StatusCode`` Pravega's clients get.
    grpc: str
    #: The same call may succeed later: the seconds REST's ``Retry-After`` asks the client to
    #: wait first (0: it may not, no ``Retry-After``).
    retry_after: int = 0
    #: The message, from the error's own (``{}``).
    message: str = "{}"

    @property
    def retry(self) -> bool:
        return self.retry_after > 0

    def say(self, exc: BaseException) -> str:
        return self.message.format(exc)


#: ``Retry-After`` when the segment store is away: about one restart of it by the standalone
#: supervisor, or one failover of its container.
SEGMENT_STORE_AWAY_SECONDS = 2
#: ``Retry-After`` when a service around the node is away (the metadata database, the broker:
#: ``controller_app.outages``), on REST, the console and the WebSocket handshake.
SERVICE_AWAY_SECONDS = 5


def _missing(code: str) -> Outcome:
    return Outcome(404, code, "NOT_FOUND")


def _away(code: str, message: str = "{}") -> Outcome:
    return Outcome(503, code, "UNAVAILABLE", SEGMENT_STORE_AWAY_SECONDS, message)


#: (error class, outcome), first match wins.
OUTCOMES: tuple[tuple[type[BaseException], Outcome], ...] = (
    (ce.ScopeNotFoundError, _missing("scope-not-found")),
    (ce.StreamNotFoundError, _missing("stream-not-found")),
    (ce.TransactionNotFoundError, _missing("transaction-not-found")),
    (ce.SegmentNotFoundError, _missing("segment-not-found")),
    (ce.ReaderGroupNotFoundError, _missing("reader-group-not-found")),
    (ce.KvtNotFoundError, _missing("kvtable-not-found")),
    (ce.KeyNotFoundError, _missing("key-not-found")),
    (ce.NoWatermarkError, _missing("no-watermark")),
    (ce.ReaderNotInGroupError, Outcome(410, "reader-not-in-group", "NOT_FOUND")),
    (ce.NotFoundError, _missing("not-found")),
    (ce.BadKeyVersionError, Outcome(412, "bad-key-version", "FAILED_PRECONDITION")),
    (ce.AlreadyExistsError, Outcome(409, "already-exists", "ALREADY_EXISTS")),
    (ce.EpochChangedError, Outcome(409, "conflict", "FAILED_PRECONDITION")),
    (ce.ConflictError, Outcome(409, "conflict", "FAILED_PRECONDITION")),
    (ce.PreconditionFailedError, Outcome(412, "precondition-failed", "FAILED_PRECONDITION")),
    (ce.IllegalTransitionError, Outcome(412, "precondition-failed", "FAILED_PRECONDITION")),
    (ce.SegmentTruncatedError, Outcome(416, "segment-truncated", "OUT_OF_RANGE")),
    (ce.InvalidStreamCutError, Outcome(400, "invalid-stream-cut", "INVALID_ARGUMENT")),
    (ce.InvalidArgumentError, Outcome(400, "invalid-argument", "INVALID_ARGUMENT")),
    (ce.PermissionRefusedError, Outcome(403, "permission-denied", "PERMISSION_DENIED")),
    (ce.QuotaExceededError, Outcome(409, "quota-exceeded", "RESOURCE_EXHAUSTED")),
    (ce.WorkflowTimeoutError, Outcome(504, "workflow-timeout", "DEADLINE_EXCEEDED")),
    # A container with no node yet (a failover under way) is away for a moment, not missing.
    (ce.NoNodeForSegmentError, _away("no-segment-store")),
    (ce.Tier1UnavailableError, _away("tier1-unavailable")),
    (ce.SegmentStoreUnavailableError, _away("segment-store-unavailable")),
    # What the segment store answered the controller's own calls
    (
        ssc.SegmentSealedError,
        Outcome(412, "stream-sealed", "FAILED_PRECONDITION", message="the stream is sealed: {}"),
    ),
    # An event the stream's schema enforcement refused (the message names it and why)
    (ssc.SchemaRefusedError, Outcome(400, "schema-refused", "INVALID_ARGUMENT")),
    (TimeoutError, _away("segment-store-timeout", "the segment store did not answer in time")),
    (ssc.SegmentStoreError, _away("segment-store-unavailable", "the segment store failed: {}")),
    (OSError, _away("segment-store-unavailable", "the segment store failed: {}")),
)

#: Errors ``controller_app.outages`` answers (503, ``UNAVAILABLE``) before the table is read.
OUTAGES: tuple[type[BaseException], ...] = (ce.BrokerUnavailableError,)

#: The answer to an error with no row (a bug; logged with its traceback).
INTERNAL = Outcome(500, "internal-error", "INTERNAL")


def outcome_of(exc: BaseException) -> Outcome | None:
    """The row of ``exc``, or None: a bug, answered ``INTERNAL`` after it is logged."""
    for cls, outcome in OUTCOMES:
        if isinstance(exc, cls):
            return outcome
    return None
