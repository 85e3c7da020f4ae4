"""Errors the segment store engine raises to its callers (wire server, controller client).

Each maps to one wire-protocol reply; the mapping lives in ``segment_app.server``.
"""

from __future__ import annotations

__all__ = [
    "BadAttributeUpdateError",
    "BadEventNumberError",
    "BadOffsetError",
    "ContainerOfflineError",
    "EngineError",
    "InvalidArgumentError",
    "InvariantError",
    "SegmentExistsError",
    "SegmentNotFoundError",
    "SegmentSealedError",
    "SegmentTruncatedError",
    "TableKeyBadVersionError",
    "TableKeyDoesNotExistError",
    "TableSegmentNotEmptyError",
    "TierBackloggedError",
    "TierUnavailableError",
    "TooLargeError",
]


class EngineError(Exception):
    """Base of all engine errors. ``segment`` names the segment concerned, when there is one."""

    def __init__(self, message: str, *, segment: str = "") -> None:
        super().__init__(message)
        self.segment = segment


class SegmentNotFoundError(EngineError):
    """The segment does not exist (or was deleted, or merged away)."""


class SegmentExistsError(EngineError):
    """A segment of that name exists already."""


class SegmentSealedError(EngineError):
    """The segment is sealed: no more appends. ``length`` is its final length."""

    def __init__(self, message: str, *, segment: str = "", length: int = 0) -> None:
        super().__init__(message, segment=segment)
        self.length = length


class SegmentTruncatedError(EngineError):
    """A read below the segment's start offset. ``start_offset`` is the first readable byte."""

    def __init__(self, message: str, *, segment: str = "", start_offset: int = 0) -> None:
        super().__init__(message, segment=segment)
        self.start_offset = start_offset


class InvalidArgumentError(EngineError):
    """A request argument is invalid (bad name, negative length ...)."""


class BadOffsetError(EngineError):
    """A conditional append whose expected offset is not the segment's length, or a bad offset."""

    def __init__(self, message: str, *, segment: str = "", length: int = 0) -> None:
        super().__init__(message, segment=segment)
        self.length = length


class BadEventNumberError(EngineError):
    """An idempotent append whose event numbers are not usable (e.g. not increasing in a block)."""


class BadAttributeUpdateError(EngineError):
    """A conditional attribute update whose expected value did not match."""


class TooLargeError(EngineError):
    """An append larger than the container accepts in one operation."""


class TableKeyBadVersionError(EngineError):
    """A table update or removal whose key is not at the version it expected (or exists when it
    was expected absent)."""


class TableKeyDoesNotExistError(EngineError):
    """A table update or removal that expected a version of a key that does not exist."""


class TableSegmentNotEmptyError(EngineError):
    """A table segment deleted on condition that it is empty, which it is not."""


class ContainerOfflineError(EngineError):
    """The container is not running (starting, stopped, fenced by a newer instance, failed)."""


class InvariantError(EngineError):
    """An internal invariant broke; the container stops rather than serve wrong data."""


class TierBackloggedError(ContainerOfflineError):
    """Appends refused: tier-2 has been behind so long that the data waiting for it filled the
    cache, and appends were held back past ``refuse_after_ms``. Retriable: the client sends
    them again later (on the wire it is a WrongHost, as for a container that is not served)."""


class AppendsRefusedError(ContainerOfflineError):
    """Appends refused by the store as a whole (``SegmentStore.refuse_appends``), e.g. while
    the node's disk is nearly full: the message says why. Retriable, as a WrongHost: the client
    sends them again later, until its delivery timeout."""


class TierUnavailableError(ContainerOfflineError):
    """A read needed tier-2, which failed or did not answer in time. Retriable: never wrong
    data, and the same read works once tier-2 answers again."""
