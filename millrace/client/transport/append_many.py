"""``append_many``: several writers' events in one call, completed in the order of the calls.

Responsibility: ``AppendMany`` serves ``append_many`` over the append sessions of one
connection (``millrace.client.transport.appends``; adding a pair touches a writer's session
directly, on the path each event takes): a call's ``(writer, events)`` pairs are checked
(nothing is queued unless all pass), put in their writers' open blocks (in one pass while they
take the common path, ``_add_at_once``), and completed by one future once every block opened
before the call returned is answered (``completion``), with no coroutine, future or callback
per writer. Calls add their events one at a time, in turn, so a writer gets them in the order of the
calls; a failed writer fails the calls that had events in its unacknowledged blocks.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import uuid
from collections.abc import Awaitable, Iterable, Iterator, Sequence
from typing import Any

from millrace.client.errors import InvalidArgumentError
from millrace.client.transport.append_blocks import EVENT_HEADER_BYTES, Session, WriterHandle
from millrace.client.transport.appends import AppendSessions

__all__ = ["AppendMany"]

_BYTES_LIKE = (bytes, bytearray, memoryview)


class AppendMany:
    """``append_many`` over the append sessions of one connection (see the module's
    docstring)."""

    def __init__(self, appends: AppendSessions) -> None:
        self._appends = appends
        self._completion = appends.completion
        #: Set while an ``append_many`` call adds its events; the calls waiting for their turn.
        self._many_busy = False
        self._many_gate: collections.deque[asyncio.Future[None]] = collections.deque()

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
        appends = self._appends
        if not appends.writable.is_set():
            await appends.writable.wait()
        if appends.connection.lost is not None:
            raise appends.connection.lost
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
        appends = self._appends
        sessions = appends.sessions
        limit = appends.limits.event_bytes_max
        for writer, given in pairs:
            known = sessions.get(writer.int) if type(writer) is uuid.UUID else None
            session = known if known is not None and known.failure is None else None
            if session is None:
                session = appends.session(writer)  # (a handle, or raises the reason)
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
        appends = self._appends
        sessions, open_block = appends.sessions, appends.open_block
        limit = appends.limits.event_bytes_max
        size = 0
        try:
            for writer, share in pairs:
                session = writer if type(writer) is Session else sessions.get(writer.int)
                if (
                    session is None
                    or session.failure is not None
                    or session.owner is not appends
                    or type(share) is not bytes
                ):
                    break
                events = session.open_events
                n = len(share)
                if n == session.open_size and len(events) < session.open_cap:
                    events.append(share)
                elif not events and n <= limit:  # the block opens
                    open_block(session, False, n)
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
        order = self._completion.order
        for _ in opened:
            order.pop()
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
        appends, completion = self._appends, self._completion
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        number = completion.begin_call(future, found)  # (a writer failing meanwhile fails it)
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
                put = appends.fill_open(session, many, False, 0)  # (no coroutine if it fits)
                added_bytes += session.block_bytes() - before
                if put < len(many):
                    waited = True
                    await appends.fill_all(session, many[put:])
                opened.append(session)  # (_schedule: its last block is not sent yet)
                added = True
        except BaseException:
            completion.drop_call(number)
            raise
        finally:
            completion.call_added(number)
            appends.open_bytes += added_bytes
            appends.limit_open()
            schedule = appends.timing.schedule
            for session in opened:
                schedule(session)
        appends.timing.window.events += start + len(pairs)
        if added or start:
            completion.call_returned(number)
        else:
            completion.drop_call(number)
            future.set_result(None)
        return future
