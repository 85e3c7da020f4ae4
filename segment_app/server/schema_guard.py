"""Streams' appends held to their schemas: the guard a node puts in front of its append path.

Responsibility: know each stream's schema policy (``millrace.kernel.schema_policy``) well enough
to judge a block of events at once on the append path. Policies are read through the node's
``SchemaPolicies`` port in a thread and cached per stream; one read at a time per stream (callers
share it). A writer's SetupAppend waits until its stream's policy is known. A block is judged
with the cached policy while it is younger than ``MAX_AGE_SECONDS`` (past half of that it is
read again in the background, so a stream written steadily never waits); an older one is read
again before the block is judged, so a change of enforcement holds for every block that arrives
``MAX_AGE_SECONDS`` after it.

``judge`` answers for one block: None (append it), a ``Refusal`` (the event, and why), or
``UNKNOWN_SCHEMA`` when an event names a schema id the cached policy does not have: the
subject may have a version registered since (Confluent's serializers register a schema, then
produce with its id at once), so the caller waits for ``reload`` and judges again, with
``final`` (an id still unknown then is refused).

When the policies cannot be read (the metadata database is away, or hangs), a block waits at
most ``READ_WAIT_SECONDS``, then the cached policy is used, however old, for ``KEEP_SECONDS``
before it is waited for again; a stream never read refuses its writers' SetupAppend as
offline (the client asks again), never lets them in unguarded.
Internal streams (names starting with ``_``: reader group states, watermarks, the system
scope) are never guarded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
import time

from millrace.kernel import wire as wire
from millrace.kernel.naming import parent_name
from millrace.kernel.schema_policy import (
    ENFORCEMENT_VALIDATE,
    HEADER_BYTES,
    REFUSAL_MARK,
    SchemaPolicies,
    SchemaPolicy,
)
from segment_app.engine.errors import ContainerOfflineError, InvalidArgumentError

__all__ = ["MAX_AGE_SECONDS", "UNKNOWN_SCHEMA", "Refusal", "SchemaGuard", "SchemaRefusedError"]

log = logging.getLogger(__name__)

#: A cached policy older than this is read again before a block is judged with it.
MAX_AGE_SECONDS = 1.0
#: How long a block waits for a policy being read before the cached one is used.
READ_WAIT_SECONDS = 1.0
#: How long a cached policy is used without waiting once it could not be read.
KEEP_SECONDS = 10.0
#: The first bytes of a refused event shown in the error.
_SHOWN_BYTES = 12

_NO_HEADER = "it does not start with a schema header (0x00, then a 4-byte schema id)"
#: An event frame's start: its type and length, then the event's magic byte and schema id.
_FRAME_START = struct.Struct(">iiBI")
#: Blocks of fewer events are walked.
_UNIFORM_EVENTS_MIN = 16
_REPEATED = [bytes((value,)) for value in range(256)]
_EVENT_HEADER = wire.EVENT_HEADER
_HEADER_SIZE = _EVENT_HEADER.size


class SchemaRefusedError(InvalidArgumentError):
    """A block refused by its stream's schema enforcement (the client sees ErrorMessage,
    illegal argument, with this message). It fails that block alone: the writer's later blocks
    are judged on their own (nothing is resent in its place, so no order is broken)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """Why a block is refused: its ``index``-th event (from 0), its first bytes, the reason."""

    index: int
    head: bytes
    reason: str

    def error(self, segment: str, policy: SchemaPolicy, event_number: int) -> SchemaRefusedError:
        """The error answered, naming the event by the writer's event numbers."""
        shown = self.head.hex(" ") if self.head else "nothing"
        return SchemaRefusedError(
            f"event {self.index + 1} of the block ending at event number {event_number} "
            f"(bytes {shown}...) {REFUSAL_MARK} ({policy.mode}, subject {policy.subject!r}): "
            f"{self.reason}",
            segment=segment,
        )


#: ``judge``'s answer for a block naming a schema id the cached policy does not know.
UNKNOWN_SCHEMA = Refusal(-1, b"", "unknown schema id")


@dataclasses.dataclass(slots=True)
class _Cached:
    policy: SchemaPolicy
    read_at: float


def stream_of(segment: str) -> tuple[str, str] | None:
    """The (scope, stream) a segment's appends are guarded by; None for internal ones."""
    parts = parent_name(segment).split("/", 2)
    if len(parts) != 3 or parts[0].startswith("_") or parts[1].startswith("_"):
        return None
    return parts[0], parts[1]


class SchemaGuard:
    """The node's cache of stream policies, and the judge of blocks."""

    def __init__(self, policies: SchemaPolicies, max_age: float = MAX_AGE_SECONDS) -> None:
        self._policies = policies
        self._max_age = max_age
        self._cached: dict[tuple[str, str], _Cached] = {}
        self._reading: dict[tuple[str, str], asyncio.Future[SchemaPolicy]] = {}

    async def ready(self, stream: tuple[str, str]) -> None:
        """Wait until the stream's policy is known (read it if it never was); offline when it
        cannot be read."""
        if stream not in self._cached:
            await self.reload(stream)

    def policy(self, stream: tuple[str, str]) -> SchemaPolicy | None:
        """The cached policy (``ready`` first), or None when it is older than the maximum age
        (the caller waits for ``reload``); one past half of it is read again meanwhile."""
        cached = self._cached[stream]
        age = time.monotonic() - cached.read_at
        if age > self._max_age / 2 and stream not in self._reading:
            self._start_read(stream).add_done_callback(_quiet)
        return cached.policy if age <= self._max_age else None

    async def reload(self, stream: tuple[str, str]) -> SchemaPolicy:
        """The policy read now (joining a read under way); if it cannot be read within
        ``READ_WAIT_SECONDS``, the cached one, however old, kept for ``KEEP_SECONDS`` more
        (a database that hangs holds appends for a moment now and then, never for good);
        ``ContainerOfflineError`` if none is cached."""
        future = self._reading.get(stream) or self._start_read(stream)
        try:
            return await asyncio.wait_for(asyncio.shield(future), READ_WAIT_SECONDS)
        except Exception as exc:
            cached = self._cached.get(stream)
            if cached is not None:
                self._keep(stream, cached, exc)
                return cached.policy
            raise ContainerOfflineError(
                f"the schema policy of {'/'.join(stream)} cannot be read now ({exc}); try again"
            ) from None

    def _start_read(self, stream: tuple[str, str]) -> asyncio.Future[SchemaPolicy]:
        future = asyncio.ensure_future(asyncio.to_thread(self._policies.policy, *stream))
        self._reading[stream] = future
        future.add_done_callback(lambda done: self._read_done(stream, done))
        return future

    def _read_done(self, stream: tuple[str, str], future: asyncio.Future[SchemaPolicy]) -> None:
        self._reading.pop(stream, None)
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None:
            self._cached[stream] = _Cached(future.result(), time.monotonic())
        elif stream in self._cached:
            self._keep(stream, self._cached[stream], exc)

    def _keep(self, stream: tuple[str, str], cached: _Cached, exc: BaseException) -> None:
        """Use the cached policy for ``KEEP_SECONDS`` more: it cannot be read now."""
        kept_until = time.monotonic() + KEEP_SECONDS
        if cached.read_at + self._max_age < kept_until:
            log.warning("cannot read the schema policy of %s (%s): keeping the one read "
                        "before", "/".join(stream), exc or "no answer")  # fmt: skip
            cached.read_at = kept_until - self._max_age


def judge(policy: SchemaPolicy, data: bytes | memoryview, *, final: bool = False) -> Refusal | None:
    """Judge a block (whole events, each a wire Event frame) by ``policy``: None when every
    event passes; else the first that does not, or ``UNKNOWN_SCHEMA`` (unless ``final``).

    In ``header`` mode a block of many events of one size under one schema id (one producer's
    fixed-size records) is judged at once, by comparing the first 13 bytes of every frame; any
    other block is walked event by event."""
    if not policy.enforced:
        return None
    schemas = policy.schemas
    validate = policy.mode == ENFORCEMENT_VALIDATE
    if not validate and (_one_header(data) in schemas or _all_known(data, schemas)):
        return None
    size = len(data)
    at = index = 0
    while at < size:
        if at + _FRAME_START.size <= size:
            kind, length, magic, schema_id = _FRAME_START.unpack_from(data, at)
        elif at + _HEADER_SIZE <= size:
            (kind, length), magic, schema_id = _EVENT_HEADER.unpack_from(data, at), -1, -1
        else:
            return Refusal(index, b"", "the block ends inside an event's frame")
        start = at + _HEADER_SIZE
        at = start + length
        if kind != wire.EVENT_TYPE or length < 0 or at > size:
            return Refusal(index, b"", "the block is not whole events")
        if length < HEADER_BYTES or magic != 0:
            return Refusal(index, bytes(data[start : start + _SHOWN_BYTES]), _NO_HEADER)
        if schema_id not in schemas:
            if not final:
                return UNKNOWN_SCHEMA
            why = f"schema id {schema_id} is not registered under the subject"
            return Refusal(index, bytes(data[start : start + _SHOWN_BYTES]), why)
        if validate:
            check = schemas[schema_id]
            found = check(bytes(data[start + HEADER_BYTES : at])) if check is not None else None
            if found is not None:
                why = f"it does not decode with schema {schema_id}: {found}"
                return Refusal(index, bytes(data[start : start + _SHOWN_BYTES]), why)
        index += 1
    return None


def _all_known(data: bytes | memoryview, schemas: object) -> bool:
    """Whether every event of the block is a whole frame starting with the header of a schema
    id in ``schemas``: the walk at its quickest (``judge`` walks again to say what is wrong)."""
    size = len(data)
    last = size - _FRAME_START.size
    unpack = _FRAME_START.unpack_from
    at = 0
    while at <= last:
        kind, length, magic, schema_id = unpack(data, at)
        if kind or magic or length < HEADER_BYTES or schema_id not in schemas:  # type: ignore[operator]
            return False
        at += _HEADER_SIZE + length
    return at == size


def _one_header(data: bytes | memoryview) -> int | None:
    """The schema id of every event of a block of at least ``_UNIFORM_EVENTS_MIN`` events that
    all have the same frame type, length, magic byte and schema id (the first 13 bytes of every
    frame compared column by column, each column one strided slice); else None."""
    size = len(data)
    if size < _FRAME_START.size:
        return None
    length = int.from_bytes(data[4:8], "big")
    width = _HEADER_SIZE + length
    count = size // width if length >= HEADER_BYTES else 0
    if count < _UNIFORM_EVENTS_MIN or size % width:
        return None
    first = bytes(data[: _FRAME_START.size])
    for column, value in enumerate(first):
        if data[column::width] != _REPEATED[value] * count:
            return None
    kind, _, magic, schema_id = _FRAME_START.unpack_from(first)
    return int(schema_id) if kind == wire.EVENT_TYPE and magic == 0 else None


def _quiet(future: asyncio.Future[SchemaPolicy]) -> None:
    """(A background read's failure is logged by ``_read_done``.)"""
    if not future.cancelled():
        future.exception()
