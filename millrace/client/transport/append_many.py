"""``append_many``: several writers' events in one call, completed in the order of the calls.

Responsibility: ``AppendMany`` adds ``append_many`` to the append sessions of
``millrace.client.transport.appends`` (it extends them: adding a pair touches a writer's session
and the completion order directly, on the path each event takes): a call's ``(writer, events)``
pairs are checked (nothing is queued unless all pass), put in their writers' open blocks (in one
pass while they take the common path, ``_add_at_once``), and completed by one future once every
block opened before the call returned is answered, with no coroutine, future or callback per
writer. Calls add their events one at a time, in turn, so a writer gets them in the order of the
calls; a failed writer fails the calls that had events in its unacknowledged blocks.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import uuid
from collections.abc import Awaitable, Iterable, Iterator, Sequence
from typing import Any

from millrace.client.errors import InvalidArgumentError, SegmentStoreError
from millrace.client.transport.append_blocks import (
    BLOCK_CALL,
    EVENT_HEADER_BYTES,
    AppendLimits,
    Session,
    WriterHandle,
)
from millrace.client.transport.appends import AppendSessions
from millrace.client.transport.calls import SegmentCalls

__all__ = ["AppendMany"]

_BYTES_LIKE = (bytes, bytearray, memoryview)


class AppendMany(AppendSessions):
    """Append sessions with ``append_many`` (see the module's docstring)."""

    def __init__(self, calls: SegmentCalls, *, limits: AppendLimits | None = None) -> None:
        super().__init__(calls, limits=limits)
        #: ``append_many`` calls to complete: (blocks opened when the call returned, call
        #: number), in the order they returned; each call's future and writers by number
        #: (the writers as a list of sessions: the caller's thousands of pairs kept until the
        #: acks would make the garbage collector's passes cost a third of the producer).
        self._calls: collections.deque[tuple[int, int]] = collections.deque()
        self._call_futures: dict[int, asyncio.Future[None]] = {}
        self._call_writers: dict[int, list[Session]] = {}
        #: Set while an ``append_many`` call adds its events; the calls waiting for their turn.
        self._many_busy = False
        self._many_gate: collections.deque[asyncio.Future[None]] = collections.deque()
        #: Writers failed since the calls were last checked, by ``id`` of session: (the first
        #: call that can have an unacknowledged event of theirs, the error); see ``_fail_calls``.
        self._call_failures: dict[int, tuple[int, SegmentStoreError]] = {}

    async def append_many(
        self, batches: Iterable[tuple[uuid.UUID | WriterHandle, bytes | Sequence[bytes]]]
    ) -> asyncio.Future[None]:
        """Queue several writers' events in one call: ``(writer, events)`` pairs (a writer id
        or, cheaper, its ``writer_handle``), each as
        ``append_block`` takes them (one ``bytes`` or a sequence; a writer may come more than
        once; its events keep their order); returns one future completed when all are
        acknowledged, or failed with the first error. For a producer spreading events over
        many segments: no coroutine, future or callback per writer, nothing per writer and
        call but its events, and calls complete in the order they were made. Nothing is
        queued if an event is too large or a writer is unknown or failed. (``batches`` may be
        any iterable: ``zip(writers, events)`` costs no tuple per pair.)"""
        if not self._writable.is_set():
            await self._writable.wait()
        if self._conn.lost is not None:
            raise self._conn.lost
        if self._many_busy or self._many_gate:  # another call waits for room in flight
            pairs = list(batches)
            found = self._check_many(pairs, [])  # (nothing is queued unless all pass)
            await self._many_turn()
            return await self._many_turn_taken(self._add_many(pairs, found, 0, 0, [], True))
        self._many_busy = True
        return await self._many_turn_taken(self._add_first(batches))

    async def _many_turn_taken(
        self, adding: Awaitable[asyncio.Future[None]]
    ) -> asyncio.Future[None]:
        """Run an ``append_many`` call's adding in its turn, then give the turn on."""
        try:
            return await adding
        finally:
            self._many_done()

    async def _add_first(self, batches: Iterable[tuple[Any, Any]]) -> asyncio.Future[None]:
        """``append_many`` in its turn at once: its pairs checked and added in one pass while
        they take the common path (``_add_at_once``), the rest checked, then added."""
        found: list[Session] = []
        opened: list[Session] = []
        start = -1
        try:
            start, added_bytes, rest = self._add_at_once(iter(batches), found, opened)
            if rest:
                self._check_many(rest, found)
        except BaseException:  # (a bad pair, or one not a pair at all)
            self._take_back(found if start < 0 else found[:start], opened)
            raise
        return await self._add_many(rest, found, start, added_bytes, opened, False)

    def _check_many(self, pairs: list[tuple[Any, Any]], found: list[Session]) -> list[Session]:
        """Check the writers and event sizes of ``pairs``, adding their sessions to ``found``;
        raises the first problem."""
        sessions = self._sessions
        limit = self.limits.event_bytes_max
        for writer, given in pairs:
            known = sessions.get(writer.int) if type(writer) is uuid.UUID else None
            session = known if known is not None and known.failure is None else None
            if session is None:
                session = self._session(writer)  # (a handle, or raises the reason)
            if type(given) is bytes or isinstance(given, _BYTES_LIKE):
                if len(given) > limit:
                    raise InvalidArgumentError(f"event of {len(given)} bytes exceeds {limit}")
            elif given:
                biggest = max(map(len, given))
                if biggest > limit:
                    raise InvalidArgumentError(f"event of {biggest} bytes exceeds {limit}")
            found.append(session)
        return found

    def _add_at_once(
        self, pairs: Iterator[tuple[Any, Any]], found: list[Session], opened: list[Session]
    ) -> tuple[int, int, list[tuple[Any, Any]]]:
        """Check and add the pairs in one pass while each is a ``bytes`` for a writer with its
        open block of that event size and room in it, or with no block open (the common case
        of a call spread over thousands of writers); returns how many it added (their sessions
        in ``found``; those whose block it opened, in ``opened`` too), their bytes, and the
        pairs left. Cheaper than a pass to check and one to add; ``_take_back`` undoes it when
        a later pair fails its check."""
        sessions = self._sessions
        limit = self.limits.event_bytes_max
        size = 0
        try:
            for writer, share in pairs:
                session = writer if type(writer) is Session else sessions.get(writer.int)
                if (
                    session is None
                    or session.failure is not None
                    or session.client is not self
                    or type(share) is not bytes
                ):
                    break
                events = session.open_events
                n = len(share)
                if n == session.open_size and len(events) < session.open_cap:
                    events.append(share)
                elif not events and n <= limit:  # the block opens
                    self._open(session, False, n)
                    opened.append(session)
                    events.append(share)
                else:
                    break
                size += n
                found.append(session)
            else:
                return len(found), size + len(found) * EVENT_HEADER_BYTES, []
        except AttributeError:  # not a writer id or handle: _check_many says so
            pass
        rest = [(writer, share), *pairs]
        return len(found), size + len(found) * EVENT_HEADER_BYTES, rest

    def _take_back(self, found: list[Session], opened: list[Session]) -> None:
        """Undo ``_add_at_once``: nothing was sent or awaited meanwhile, so each session's last
        event is the one it added, and the blocks it opened are the last in the order."""
        for session in reversed(found):
            session.open_events.pop()
            if not session.open_events:
                session.open_size = -1
        for _ in opened:
            self._order.pop()
        opened.clear()

    async def _many_turn(self) -> None:
        """Wait until the ``append_many`` calls before this one have added their events."""
        turn = asyncio.get_running_loop().create_future()
        self._many_gate.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # handed the turn, then cancelled
                self._many_done()
            raise

    def _many_done(self) -> None:
        """This call added its events: the next waiting one goes on."""
        gate = self._many_gate
        while gate:
            turn = gate.popleft()
            if not turn.done():
                turn.set_result(None)  # (_many_busy stays set: handed over)
                return
        self._many_busy = False

    async def _add_many(
        self,
        pairs: list[tuple[Any, Any]],
        found: list[Session],
        start: int,
        added_bytes: int,
        opened: list[Session],
        waited: bool,
    ) -> asyncio.Future[None]:
        """The end of an ``append_many`` call, in its turn (so every writer gets the calls'
        events in the order of the calls' numbers): ``pairs``, checked (their sessions are
        ``found[start:]``; ``start`` pairs before them were added by ``_add_at_once``, with
        ``added_bytes`` and the blocks they ``opened``), go into their writers' open blocks
        through ``_fill_open`` and ``_fill_all`` (which may wait for room)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        number = self._call_floor
        self._call_futures[number] = future  # (a writer failing meanwhile fails it)
        self._call_writers[number] = found
        added = False
        try:
            for session, (_, share) in zip(
                itertools.islice(found, start, None), pairs, strict=True
            ):
                if waited and session.failure is not None:  # (it failed while we waited)
                    raise session.failure
                many = (share,) if isinstance(share, _BYTES_LIKE) else share
                if not many:
                    continue
                before = session.block_bytes()
                put = self._fill_open(session, many, False, 0)  # (no coroutine if it fits)
                added_bytes += session.block_bytes() - before
                if put < len(many):
                    waited = True
                    await self._fill_all(session, many[put:])
                opened.append(session)  # (_schedule: its last block is not sent yet)
                added = True
        except BaseException:
            self._call_futures.pop(number, None)
            self._call_writers.pop(number, None)
            raise
        finally:
            self._call_floor = number + 1
            self._open_bytes += added_bytes
            self._limit_open()
            for session in opened:
                self._schedule(session)
        self._window.events += start + len(pairs)
        if added or start:
            self._calls.append((len(self._order) + self._order_done, number))
            if not self._order:
                self._advance()
        else:
            del self._call_futures[number], self._call_writers[number]
            future.set_result(None)
        return future

    # -- completion ---------------------------------------------------------------------------

    def _advance(self) -> None:
        """Fail the calls that failed writers had events of, let answered blocks leave the
        front of the completion order, then complete the calls that no block still open or
        in flight can hold events of."""
        if self._call_failures:
            self._fail_calls()
        super()._advance()
        done = self._order_done
        calls, futures = self._calls, self._call_futures
        while calls and calls[0][0] <= done:
            number = calls.popleft()[1]
            self._call_writers.pop(number, None)
            future = futures.pop(number, None)
            if future is not None and not future.done():
                future.set_result(None)

    def _fail_calls(self) -> None:
        """Fail each pending ``append_many`` call that gave a writer failed since the last
        check an event it has not had acknowledged: a call numbered from the first that can
        have one in the writer's oldest unacknowledged block (events of a writer are numbered
        in the order of the calls). One pass over the pending calls' writers for all those
        that failed together (a lost connection fails them all)."""
        failures, self._call_failures = self._call_failures, {}
        first = min(call for call, _ in failures.values())
        for number, writers in self._call_writers.items():
            future = self._call_futures.get(number)
            if number < first or future is None or future.done():
                continue
            for session in writers:
                failure = failures.get(id(session))
                if failure is not None and number >= failure[0]:
                    future.set_exception(failure[1])
                    break

    def _pending_calls(self) -> Iterable[asyncio.Future[None]]:
        return self._call_futures.values()

    def _writer_failed(self, session: Session) -> None:
        """The calls that can have unacknowledged events of this writer: from the first that
        can have events in its oldest block unacknowledged (checked at the next ``_advance``)."""
        if (session.in_flight or session.open_events) and self._call_futures:
            oldest = session.in_flight[0][BLOCK_CALL] if session.in_flight else session.open_call
            assert session.failure is not None
            self._call_failures[id(session)] = (oldest, session.failure)
