"""Errors of the segment store client: one exception per error reply of the wire protocol.

``error_from_reply`` turns an error reply (``NoSuchSegment``, ``SegmentIsSealed``,
``WrongHost`` ...) into the exception the caller gets; ``ConnectionLostError`` (and
``AppendsLostError``, which carries the unacknowledged events) when the connection goes.
"""

from __future__ import annotations

import uuid
from typing import Any

from millrace.kernel import wire
from millrace.kernel.schema_policy import REFUSAL_MARK

__all__ = [
    "AppendsLostError",
    "AuthTokenCheckFailedError",
    "BadEventNumberError",
    "BadOffsetError",
    "ConnectionLostError",
    "ContainerOfflineError",
    "DeliveryTimeoutError",
    "InvalidArgumentError",
    "OperationUnsupportedError",
    "SchemaRefusedError",
    "SegmentExistsError",
    "SegmentNotFoundError",
    "SegmentSealedError",
    "SegmentStoreError",
    "SegmentTruncatedError",
    "ServerError",
    "TableKeyBadVersionError",
    "TableKeyDoesNotExistError",
    "TableSegmentNotEmptyError",
    "error_from_reply",
]


class SegmentStoreError(Exception):
    """An error reply from the segment store (or a failure of the connection)."""

    def __init__(self, message: str, *, segment: str = "", request_id: int = -1) -> None:
        super().__init__(message)
        self.segment = segment
        self.request_id = request_id


class SegmentNotFoundError(SegmentStoreError):
    """NoSuchSegment."""


class SegmentExistsError(SegmentStoreError):
    """SegmentAlreadyExists."""


class SegmentSealedError(SegmentStoreError):
    """SegmentIsSealed."""


class SegmentTruncatedError(SegmentStoreError):
    """SegmentIsTruncated; ``start_offset`` is the first readable byte."""

    def __init__(self, message: str, *, start_offset: int = 0, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.start_offset = start_offset


class BadOffsetError(SegmentStoreError):
    """ConditionalCheckFailed: the segment length was not the expected offset."""


class BadEventNumberError(SegmentStoreError):
    """InvalidEventNumber."""


class DeliveryTimeoutError(SegmentStoreError):
    """A writer's events were refused for longer than its delivery timeout (a tier-1 that
    cannot write, a disk nearly full): they are not durable. The message says why."""


class ContainerOfflineError(SegmentStoreError):
    """WrongHost: the segment's container is not served here (now); ask again later."""

    def __init__(self, message: str, *, correct_host: str = "", **kw: Any) -> None:
        super().__init__(message, **kw)
        self.correct_host = correct_host


class InvalidArgumentError(SegmentStoreError):
    """ErrorMessage with errorCode 0 (illegal argument)."""


class SchemaRefusedError(InvalidArgumentError):
    """A block of events refused by its stream's schema enforcement: the message names the
    event and why. Those events fail; the writer goes on with the next ones."""


class ServerError(SegmentStoreError):
    """ErrorMessage with another error code: the server failed."""


class AuthTokenCheckFailedError(SegmentStoreError):
    """AuthTokenCheckFailed; ``expired`` when the token was good but has expired."""

    def __init__(self, message: str, *, expired: bool = False, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.expired = expired


class OperationUnsupportedError(SegmentStoreError):
    """OperationUnsupported."""


class TableKeyBadVersionError(SegmentStoreError):
    """TableKeyBadVersion: a key's version is not the one a conditional change expected (or
    the key exists where it was expected absent)."""


class TableKeyDoesNotExistError(SegmentStoreError):
    """TableKeyDoesNotExist: a conditional change expected a key that is absent."""


class TableSegmentNotEmptyError(SegmentStoreError):
    """TableSegmentNotEmpty: a delete that must find the table empty did not."""


class ConnectionLostError(SegmentStoreError):
    """The connection closed (or could not be set up) before the reply arrived."""


class AppendsLostError(ConnectionLostError):
    """Appends of one writer whose acknowledgement was lost with the connection."""

    def __init__(
        self,
        message: str,
        *,
        writer_id: uuid.UUID,
        unacked_events: list[tuple[int, bytes | memoryview]],
        **kw: Any,
    ) -> None:
        super().__init__(message, **kw)
        self.writer_id = writer_id
        #: (event number, payload as given to append_block: a raw append's read-only views
        #: stay views) of every unacknowledged event.
        self.unacked_events = unacked_events

    @property
    def unacked_event_numbers(self) -> list[int]:
        return [number for number, _ in self.unacked_events]


def error_from_reply(reply: Any) -> SegmentStoreError:
    """The exception an error reply stands for."""
    rid = getattr(reply, "request_id", -1)
    segment = getattr(reply, "segment", "")
    detail = getattr(reply, "server_stack_trace", "")
    name = type(reply).__name__
    message = f"{name}: {segment}" + (f" ({detail})" if detail else "")
    kw: dict[str, Any] = {"segment": segment, "request_id": rid}
    match reply:
        case wire.NoSuchSegment():
            return SegmentNotFoundError(message, **kw)
        case wire.SegmentAlreadyExists():
            return SegmentExistsError(message, **kw)
        case wire.SegmentIsSealed():
            return SegmentSealedError(message, **kw)
        case wire.SegmentIsTruncated():
            return SegmentTruncatedError(message, start_offset=reply.start_offset, **kw)
        case wire.ConditionalCheckFailed():
            return BadOffsetError(f"{name}: event {reply.event_number}", request_id=rid)
        case wire.InvalidEventNumber():
            return BadEventNumberError(f"{name}: {detail}", request_id=rid)
        case wire.WrongHost():
            return ContainerOfflineError(message, correct_host=reply.correct_host, **kw)
        case wire.AuthTokenCheckFailed():
            expired = reply.error_code == wire.TOKEN_EXPIRED
            return AuthTokenCheckFailedError(f"{name}: {detail}", expired=expired, request_id=rid)
        case wire.TableKeyBadVersion():
            return TableKeyBadVersionError(message, **kw)
        case wire.TableKeyDoesNotExist():
            return TableKeyDoesNotExistError(message, **kw)
        case wire.TableSegmentNotEmpty():
            return TableSegmentNotEmptyError(message, **kw)
        case wire.OperationUnsupported():
            return OperationUnsupportedError(f"{name}: {reply.operation_name}", request_id=rid)
        case wire.ErrorMessage(error_code=wire.ERROR_ILLEGAL_ARGUMENT):
            if REFUSAL_MARK in reply.message:
                return SchemaRefusedError(f"{name}: {reply.message}", **kw)
            return InvalidArgumentError(f"{name}: {reply.message}", **kw)
        case wire.ErrorMessage():
            return ServerError(f"{name}: {reply.message}", **kw)
    return SegmentStoreError(f"unexpected reply {reply!r}", request_id=rid)
