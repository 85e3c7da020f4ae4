"""The public surface of the segment store engine: what adapters (wire server, tests) call.

``SegmentStore`` (``segment_app.engine.store``) implements it by routing each segment name to its
container. All methods are coroutines; the ``*_nowait`` variants return a future right away so a
connection can pipeline many appends without awaiting each in turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from typing import Protocol

__all__ = [
    "AppendItem",
    "AppendResult",
    "AttributeUpdate",
    "ReadResult",
    "SegmentInfo",
    "SegmentStoreAPI",
]

#: Attribute value meaning "no value" (Pravega's Long.MIN_VALUE).
NULL_ATTRIBUTE_VALUE = -(2**63)


@dataclasses.dataclass(slots=True)
class AppendResult:
    """Outcome of an append: the segment length after it and the writer's previous event number.

    (Not frozen: one is made per append, and a frozen dataclass costs three times as much to
    build. Treat it as read-only.)"""

    length: int
    previous_event_number: int
    duplicate: bool = False


@dataclasses.dataclass(slots=True)
class AppendItem:
    """One append of a group (``append_group_nowait``); the store fills in its outcome.

    The fields mean what ``append_nowait``'s arguments mean. When the group's future completes
    successfully, each item has either ``result`` (durable, or a duplicate) or ``error``.
    """

    segment: str
    data: bytes | memoryview
    writer_id: uuid.UUID | None = None
    event_number: int | None = None
    expected_offset: int | None = None
    result: AppendResult | None = None
    error: BaseException | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ReadResult:
    """Bytes read at ``offset``. ``at_tail``: nothing more to read now; ``end_of_segment``: the
    segment is sealed and this read reached its end."""

    offset: int
    data: bytes
    at_tail: bool
    end_of_segment: bool


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentInfo:
    name: str
    exists: bool
    sealed: bool
    deleted: bool
    last_modified_ms: int
    length: int
    start_offset: int
    storage_length: int


@dataclasses.dataclass(frozen=True, slots=True)
class AttributeUpdate:
    """Set ``attribute_id`` to ``value``; if ``expected`` is given the old value must equal it
    (``NULL_ATTRIBUTE_VALUE`` = must be absent)."""

    attribute_id: uuid.UUID
    value: int
    expected: int | None = None


class SegmentStoreAPI(Protocol):
    def container(self, name: str) -> object:
        """The container serving ``name`` on this node now (a new object each time it is
        replaced: restarted, moved away and back). Raises ContainerOfflineError."""

    async def create_segment(self, name: str) -> None:
        """Create an empty segment. Raises SegmentExistsError."""

    def append_nowait(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        writer_id: uuid.UUID | None = None,
        event_number: int | None = None,
        expected_offset: int | None = None,
    ) -> asyncio.Future[AppendResult]:
        """Queue an append; the future completes once it is durable in tier-1.

        ``writer_id``/``event_number`` make it idempotent: ``event_number`` is the number of the
        last event in ``data``; if it is not above the writer's last persisted event number the
        append is acknowledged as a duplicate and dropped. ``expected_offset`` makes it
        conditional (BadOffsetError if the segment length differs). Futures complete in the order
        the appends were queued (per container).
        """

    def append_group_nowait(
        self, items: Sequence[AppendItem]
    ) -> list[tuple[list[AppendItem], asyncio.Future[object]]]:
        """Queue many appends at once (a wire connection's appends of one read buffer): one
        durable log operation group, and one future, per container instead of one per append.

        Returns the items split by container, in their order, each part with its future. When a
        future completes, every item of its part has its ``result`` or ``error``; when it
        fails, every item of its part failed with that error (tier-1 failure, container
        offline). The items of one segment are appended in the order given, and an item refused
        before the log (too large) makes the later items of the same writer and segment in the
        group fail with the same error, so a writer's data never has a gap.
        """

    async def append(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        writer_id: uuid.UUID | None = None,
        event_number: int | None = None,
        expected_offset: int | None = None,
    ) -> AppendResult: ...

    async def read(
        self, name: str, offset: int, max_length: int, *, wait_seconds: float = 0.0
    ) -> ReadResult:
        """Read up to ``max_length`` bytes at ``offset``. At the tail of an unsealed segment it
        waits up to ``wait_seconds`` for data, then returns empty with ``at_tail``.
        Raises SegmentNotFoundError, SegmentTruncatedError (offset < start offset),
        BadOffsetError (offset > length)."""

    async def get_info(self, name: str) -> SegmentInfo:
        """Raises SegmentNotFoundError."""

    async def seal(self, name: str) -> int:
        """Seal; returns the final length. Sealing a sealed segment is not an error."""

    async def truncate(self, name: str, offset: int) -> None:
        """Move the start offset forward (never backwards: a lower offset is a no-op)."""

    async def delete(self, name: str) -> None: ...

    async def merge(self, target: str, source: str) -> int:
        """Seal ``source`` and append all its bytes to ``target`` atomically; delete ``source``.
        Returns the new length of ``target``."""

    async def get_attributes(self, name: str, ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
        """Values of the given attributes (NULL_ATTRIBUTE_VALUE when absent)."""

    async def update_attributes(self, name: str, updates: list[AttributeUpdate]) -> None:
        """Apply all updates atomically; BadAttributeUpdateError if an expectation fails."""

    async def last_event_number(self, name: str, writer_id: uuid.UUID) -> int:
        """The writer's last persisted event number on the segment, or NULL_ATTRIBUTE_VALUE."""
