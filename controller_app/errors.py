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


class InvalidStreamCutError(ControllerError, ValueError):
    """A stream cut that is not a consistent position of its stream (the message says why)."""


class SegmentNotFoundError(ControllerError, LookupError):
    """No segment record with this id in this stream."""


class NoNodeForSegmentError(ControllerError, LookupError):
    """The segment's container is not assigned to any node (yet)."""
