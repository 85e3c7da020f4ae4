"""How engine and auth errors become wire-protocol error replies (the one mapping table).

| error                                   | reply                                          |
|-----------------------------------------|------------------------------------------------|
| SegmentNotFoundError                    | NoSuchSegment                                  |
| SegmentExistsError                      | SegmentAlreadyExists                           |
| SegmentSealedError                      | SegmentIsSealed                                |
| SegmentTruncatedError                   | SegmentIsTruncated (with the start offset)     |
| BadEventNumberError                     | InvalidEventNumber                             |
| TableKeyBadVersionError                 | TableKeyBadVersion                             |
| TableKeyDoesNotExistError               | TableKeyDoesNotExist                           |
| TableSegmentNotEmptyError               | TableSegmentNotEmpty                           |
| BadOffsetError of a conditional append  | ConditionalCheckFailed (decided by the caller) |
| ContainerOfflineError (and its kinds     | WrongHost with an empty correct host, the      |
| TierBackloggedError, TierUnavailable...) |   message in serverStackTrace                  |
| InvalidArgumentError, BadOffsetError,   | ErrorMessage, errorCode 0                      |
| TooLargeError, BadAttributeUpdateError  |   (ILLEGAL_ARGUMENT_EXCEPTION)                 |
| AuthError                               | AuthTokenCheckFailed, errorCode 1 if expired   |
|                                         |   else 0                                       |
| UnsupportedOperationError               | OperationUnsupported                           |
| anything else                           | ErrorMessage, errorCode -1 (logged)            |

ContainerOfflineError becomes WrongHost, as Pravega answers for a container this host does not
(or not yet) run: every Pravega client treats WrongHost as "ask the controller where the segment
lives and retry", which is right for a container that is restarting, for appends refused while
tier-2 is too far behind, and for a read that needs a tier-2 that does not answer; ErrorMessage
would fail the caller. Stack traces are never sent: the ``serverStackTrace`` fields carry the
error message.
"""

from __future__ import annotations

import logging
import uuid

from millrace.kernel import wire as wire
from millrace.kernel.claims import AuthError
from segment_app.engine.errors import (
    BadAttributeUpdateError,
    BadEventNumberError,
    BadOffsetError,
    ContainerOfflineError,
    EngineError,
    InvalidArgumentError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
    TableKeyBadVersionError,
    TableKeyDoesNotExistError,
    TableSegmentNotEmptyError,
    TooLargeError,
)

__all__ = ["UnsupportedOperationError", "reply_for_error"]

log = logging.getLogger(__name__)

_ILLEGAL_ARGUMENT = (InvalidArgumentError, BadOffsetError, TooLargeError, BadAttributeUpdateError)
_NO_WRITER = uuid.UUID(int=0)


class UnsupportedOperationError(Exception):
    """A request this server understands but does not serve (yet)."""

    def __init__(self, operation: str, message: str = "") -> None:
        super().__init__(message or f"{operation} is not supported")
        self.operation = operation


def reply_for_error(
    exc: BaseException,
    *,
    request_id: int,
    segment: str = "",
    writer_id: uuid.UUID | None = None,
    event_number: int = -1,
    offset: int = -1,
) -> object:
    """The reply telling the client about ``exc`` (see the module table)."""
    message = str(exc)
    if isinstance(exc, EngineError):
        return _engine_reply(
            exc, request_id, exc.segment or segment, writer_id, event_number, offset
        )
    if isinstance(exc, AuthError):
        code = wire.TOKEN_EXPIRED if exc.expired else wire.TOKEN_CHECK_FAILED
        return wire.AuthTokenCheckFailed(request_id, message, code)
    if isinstance(exc, UnsupportedOperationError):
        return wire.OperationUnsupported(request_id, exc.operation, message)
    if isinstance(exc, ValueError | wire.ProtocolError):
        return wire.ErrorMessage(request_id, segment, message, wire.ERROR_ILLEGAL_ARGUMENT)
    log.error("request %d on %r failed", request_id, segment, exc_info=exc)
    return wire.ErrorMessage(
        request_id, segment, f"internal error: {type(exc).__name__}", wire.ERROR_UNSPECIFIED
    )


def _engine_reply(
    exc: EngineError,
    request_id: int,
    segment: str,
    writer_id: uuid.UUID | None,
    event_number: int,
    offset: int,
) -> object:
    message = str(exc)
    if isinstance(exc, SegmentNotFoundError):
        return wire.NoSuchSegment(request_id, segment, message, offset)
    if isinstance(exc, SegmentExistsError):
        return wire.SegmentAlreadyExists(request_id, segment, message)
    if isinstance(exc, SegmentSealedError):
        return wire.SegmentIsSealed(request_id, segment, message, offset)
    if isinstance(exc, SegmentTruncatedError):
        return wire.SegmentIsTruncated(request_id, segment, exc.start_offset, message, offset)
    if isinstance(exc, TableKeyBadVersionError):
        return wire.TableKeyBadVersion(request_id, segment, message)
    if isinstance(exc, TableKeyDoesNotExistError):
        return wire.TableKeyDoesNotExist(request_id, segment, message)
    if isinstance(exc, TableSegmentNotEmptyError):
        return wire.TableSegmentNotEmpty(request_id, segment, message)
    if isinstance(exc, BadEventNumberError):
        return wire.InvalidEventNumber(writer_id or _NO_WRITER, request_id, message, event_number)
    if isinstance(exc, ContainerOfflineError):
        return wire.WrongHost(request_id, segment, "", message)
    if isinstance(exc, _ILLEGAL_ARGUMENT):
        return wire.ErrorMessage(request_id, segment, message, wire.ERROR_ILLEGAL_ARGUMENT)
    log.error("request %d on %r failed", request_id, segment, exc_info=exc)
    return wire.ErrorMessage(request_id, segment, message, wire.ERROR_UNSPECIFIED)
