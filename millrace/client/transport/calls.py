"""The request/reply calls of a segment store client: create, info, read, seal, truncate, delete,
merge and attributes.

Responsibility: ``SegmentCalls``, a part of the client, turns each call into its wire request,
sends it on the ``Connection`` it is given (any number outstanding at once) and turns the reply
into a result or into the error it names (``millrace.client.errors``). An expired default
delegation token is renewed once through ``token_refresh``. The append sessions
(``millrace.client.transport.appends``) make their ``setup_append`` through ``call`` too.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from millrace.client.errors import AuthTokenCheckFailedError, error_from_reply
from millrace.client.transport.connection import Connection
from millrace.kernel import wire

__all__ = [
    "NULL_ATTRIBUTE_VALUE",
    "READ_BYTES_DEFAULT",
    "ReadResult",
    "SegmentCalls",
    "SegmentInfo",
]

T = TypeVar("T")

#: Attribute value meaning "no value" (Java Long.MIN_VALUE).
NULL_ATTRIBUTE_VALUE = -(2**63)
#: Java's largest read reply; asking for more gets at most this much.
READ_BYTES_DEFAULT = 2 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentInfo:
    segment: str
    exists: bool
    sealed: bool
    deleted: bool
    last_modified_ms: int
    write_offset: int
    start_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class ReadResult:
    offset: int
    data: bytes
    at_tail: bool
    end_of_segment: bool


class SegmentCalls:
    """Request/reply calls on one connection."""

    def __init__(
        self,
        connection: Connection,
        *,
        delegation_token: str = "",
        token_refresh: Callable[[], Awaitable[str]] | None = None,
    ) -> None:
        self.connection = connection
        self.delegation_token = delegation_token
        #: Gets a new ``delegation_token`` when the segment store says it has expired (the
        #: request is then sent once more with it); ``None``: the error is raised.
        self.token_refresh = token_refresh

    def token(self, token: str | None) -> str:
        """``token``, or the default delegation token when it is None."""
        return self.delegation_token if token is None else token

    async def call(self, make: Any, expected: type[T], *, refreshed: bool = False) -> T:
        """Send ``make(request_id)`` and wait for its reply; error replies are raised, except
        an expired default token once: ``token_refresh`` renews it and the request goes again
        (a token the caller passed is left to the caller)."""
        reply = await self.connection.request(make)
        if isinstance(reply, expected):
            return reply
        error = error_from_reply(reply)
        if (
            isinstance(error, AuthTokenCheckFailedError)
            and error.expired
            and self.token_refresh is not None
            and not refreshed
        ):
            self.delegation_token = await self.token_refresh()
            return await self.call(make, expected, refreshed=True)
        raise error

    async def create_segment(self, segment: str, *, token: str | None = None) -> None:
        def make(rid: int) -> Any:
            return wire.CreateSegment(rid, segment, 0, 0, self.token(token), 0)

        await self.call(make, wire.SegmentCreated)

    async def get_info(self, segment: str, *, token: str | None = None) -> SegmentInfo:
        def make(rid: int) -> Any:
            return wire.GetStreamSegmentInfo(rid, segment, self.token(token))

        r = await self.call(make, wire.StreamSegmentInfo)
        return SegmentInfo(
            r.segment_name, r.exists, r.is_sealed, r.is_deleted, r.last_modified,
            r.write_offset, r.start_offset,
        )  # fmt: skip

    async def read_segment(
        self,
        segment: str,
        offset: int,
        length: int = READ_BYTES_DEFAULT,
        *,
        token: str | None = None,
    ) -> ReadResult:
        """Up to ``length`` bytes at ``offset``; at the tail the server waits a little for data."""

        def make(rid: int) -> Any:
            return wire.ReadSegment(segment, offset, length, self.token(token), rid)

        r = await self.call(make, wire.SegmentRead)
        return ReadResult(r.offset, bytes(r.data), r.at_tail, r.end_of_segment)

    async def locate_offset(
        self, segment: str, target_offset: int, *, token: str | None = None
    ) -> int:
        """The first event boundary at or after ``target_offset`` (the segment's length when
        none is below it)."""

        def make(rid: int) -> Any:
            return wire.LocateOffset(rid, segment, target_offset, self.token(token))

        return (await self.call(make, wire.OffsetLocated)).offset

    async def seal(self, segment: str, *, token: str | None = None) -> None:
        await self.call(
            lambda rid: wire.SealSegment(rid, segment, self.token(token)), wire.SegmentSealed
        )

    async def truncate(self, segment: str, offset: int, *, token: str | None = None) -> None:
        def make(rid: int) -> Any:
            return wire.TruncateSegment(rid, segment, offset, self.token(token))

        await self.call(make, wire.SegmentTruncated)

    async def delete(self, segment: str, *, token: str | None = None) -> None:
        await self.call(
            lambda rid: wire.DeleteSegment(rid, segment, self.token(token)), wire.SegmentDeleted
        )

    async def merge(self, target: str, source: str, *, token: str | None = None) -> int:
        """Append all of ``source`` to ``target`` and delete it; returns the new target length."""

        def make(rid: int) -> Any:
            return wire.MergeSegments(rid, target, source, self.token(token))

        return (await self.call(make, wire.SegmentsMerged)).new_target_write_offset

    async def get_attribute(
        self, segment: str, attribute_id: uuid.UUID, *, token: str | None = None
    ) -> int:
        def make(rid: int) -> Any:
            return wire.GetSegmentAttribute(rid, segment, attribute_id, self.token(token))

        return (await self.call(make, wire.SegmentAttribute)).value

    async def update_attribute(
        self,
        segment: str,
        attribute_id: uuid.UUID,
        new_value: int,
        expected_value: int = NULL_ATTRIBUTE_VALUE,
        *,
        token: str | None = None,
    ) -> bool:
        """Set the attribute if its value is ``expected_value`` (NULL: absent); False if not."""

        def make(rid: int) -> Any:
            return wire.UpdateSegmentAttribute(
                rid, segment, attribute_id, new_value, expected_value, self.token(token)
            )

        return (await self.call(make, wire.SegmentAttributeUpdated)).success
