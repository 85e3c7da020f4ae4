"""Errors of the controller's metadata layer, raised by selectors and the state helper.

Each carries a clear message naming the record; the REST layer maps them to stable codes.
"""

from __future__ import annotations


class ControllerError(Exception):
    """Base of every controller error."""


class IllegalTransitionError(ControllerError):
    """A state change the transitions table forbids, or a record not in the state expected."""


class ConflictError(ControllerError):
    """A compare-and-swap lost a race: the record changed since it was read. Re-read, retry."""


class EpochChangedError(ConflictError):
    """The stream moved to another epoch (a scale, or a rolling transaction commit) since the
    request read its segments: the request names segments that are no longer current."""


class InvalidStreamCutError(ControllerError, ValueError):
    """A stream cut that is not a consistent position of its stream (the message says why)."""


class SegmentNotFoundError(ControllerError, LookupError):
    """No segment record with this id in this stream."""


class NoNodeForSegmentError(ControllerError, LookupError):
    """The segment's container is not assigned to any node (yet)."""


class SegmentStoreUnavailableError(ControllerError):
    """The segment store could not be reached or did not answer in time (it may be restarting):
    the operation may succeed if tried again."""


class Tier1UnavailableError(SegmentStoreUnavailableError):
    """The segment store refuses appends: its tier-1 cannot write, or its disk is nearly full
    (the message says which). Retriable once space is freed or tier-1 returns."""


class SegmentTruncatedError(ControllerError):
    """A read below the segment's start offset: those bytes were truncated away."""


class NotFoundError(ControllerError, LookupError):
    """A named record (scope, stream, transaction, reader group) does not exist."""


class ScopeNotFoundError(NotFoundError):
    """No scope with this name."""


class StreamNotFoundError(NotFoundError):
    """No stream with this name in this scope."""


class TransactionNotFoundError(NotFoundError):
    """No open or completed transaction with this id in this stream."""


class ReaderGroupNotFoundError(NotFoundError):
    """No reader group with this name in this scope."""


class KvtNotFoundError(NotFoundError):
    """No key-value table with this name in this scope."""


class KeyNotFoundError(NotFoundError):
    """The key-value table has no entry with this key (or a change expected one)."""


class BadKeyVersionError(ControllerError):
    """A conditional change of a key-value table entry expected another version (or the key
    absent)."""


class ReaderNotInGroupError(NotFoundError):
    """The reader is not, or no longer, a member of the reader group (it left, was declared
    dead after its timeout, or never joined); it must join again."""


class NoWatermarkError(NotFoundError):
    """The stream has no watermark yet: no live writer has reported a time since it began."""


class AlreadyExistsError(ControllerError):
    """A record with this name exists already (a create that is not a retry of the same one)."""


class PreconditionFailedError(ControllerError):
    """The record exists but is not in a state that allows the operation (scope not empty,
    stream not sealed, stream sealed, transaction no longer open, ...)."""


class InvalidArgumentError(ControllerError, ValueError):
    """A request that can never succeed as given: bad name, bad configuration, bad key ranges."""


class WorkflowTimeoutError(ControllerError, TimeoutError):
    """A workflow was requested but did not finish within the wait the caller allowed; it
    goes on in the background (its intent is recorded)."""


class PermissionRefusedError(ControllerError):
    """The caller may not do this (``controller_app.access.grants``): the message names the resource
    and the permission it lacks, and why."""

    def __init__(self, resource: str, permission: str = "", why: str = "") -> None:
        self.resource, self.permission = resource, permission
        reason = f" ({why})" if why else ""
        message = f"{permission} on {resource} is not granted to you{reason}"
        super().__init__(message if permission else resource)


class QuotaExceededError(ControllerError):
    """A create past a count its scope's quota allows (``controller_app.quotas``)."""


class BrokerUnavailableError(ControllerError):
    """The Celery broker did not take a workflow's task. The workflow's intent is recorded in
    the database: the task is sent again when the request is repeated or by the sweeper, once
    the broker is back."""
