"""The completion order of a connection's append blocks, and the ``append_many`` calls it ends.

Responsibility: every block a connection's append sessions open (``appends``) takes a place in
the order blocks are opened; answered (or failed) blocks leave once they reach the front. An
``append_many`` call (``append_many``) is numbered, and done once every block opened before it
returned has left, since those hold all its events: one count per call, with no coroutine,
future or callback per writer. A writer that fails fails the calls that can have events in its
unacknowledged blocks.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable

from millrace.client.errors import SegmentStoreError
from millrace.client.transport.append_blocks import BLOCK_CALL, Session

__all__ = ["CompletionOrder"]


class CompletionOrder:
    """The blocks of one connection in the order they were opened, and its ``append_many``
    calls still pending."""

    def __init__(self) -> None:
        #: Request ids of the blocks not yet answered, oldest opened first (answered ones
        #: leave once they reach the front) ...
        self.order: collections.deque[int] = collections.deque()
        #: ... the answered (or failed) ones still in it ...
        self.resolved: set[int] = set()
        #: ... and how many have left it (so blocks opened so far: this + len(order)).
        self.left = 0
        #: The number of the ``append_many`` call running, or of the next one: no event added
        #: from now on belongs to an earlier call (calls add theirs one at a time). A block
        #: records it when it opens (0 while ``append_many`` is not used).
        self.call_floor = 0
        #: ``append_many`` calls to complete: (blocks opened when the call returned, call
        #: number), in the order they returned; each call's future and writers by number
        #: (the writers as a list of sessions: the caller's thousands of pairs kept until the
        #: acks would make the garbage collector's passes cost a third of the producer).
        self._calls: collections.deque[tuple[int, int]] = collections.deque()
        self._futures: dict[int, asyncio.Future[None]] = {}
        self._writers: dict[int, list[Session]] = {}
        #: Writers failed since the calls were last checked, by ``id`` of session: (the first
        #: call that can have an unacknowledged event of theirs, the error); see ``_fail_calls``.
        self._failures: dict[int, tuple[int, SegmentStoreError]] = {}

    def open(self, request_id: int) -> int:
        """A block opens with ``request_id``: its place in the order; the number of the first
        call that can have events in it."""
        self.order.append(request_id)
        return self.call_floor

    def advance(self) -> None:
        """Fail the calls that failed writers had events of, let answered blocks leave the
        front of the order, then complete the calls that no block still open or in flight can
        hold events of."""
        if self._failures:
            self._fail_calls()
        order, resolved = self.order, self.resolved
        left = 0
        while order and order[0] in resolved:
            resolved.remove(order.popleft())
            left += 1
        self.left += left
        calls, futures = self._calls, self._futures
        while calls and calls[0][0] <= self.left:
            number = calls.popleft()[1]
            self._writers.pop(number, None)
            future = futures.pop(number, None)
            if future is not None and not future.done():
                future.set_result(None)

    # -- append_many calls ------------------------------------------------------------------------

    def begin_call(self, future: asyncio.Future[None], writers: list[Session]) -> int:
        """An ``append_many`` call starts adding the events of ``writers`` (a writer failing
        meanwhile fails ``future``); its number."""
        number = self.call_floor
        self._futures[number] = future
        self._writers[number] = writers
        return number

    def drop_call(self, number: int) -> None:
        """The call raised, or added nothing: forget it."""
        self._futures.pop(number, None)
        self._writers.pop(number, None)

    def call_added(self, number: int) -> None:
        """The call added its events: later events belong to later calls."""
        self.call_floor = number + 1

    def call_returned(self, number: int) -> None:
        """The call returned: it is done once every block opened so far has left the order."""
        self._calls.append((len(self.order) + self.left, number))
        if not self.order:
            self.advance()

    def pending_calls(self) -> Iterable[asyncio.Future[None]]:
        """The futures of the calls still pending (``flush`` waits for them)."""
        return self._futures.values()

    def writer_failed(self, session: Session) -> None:
        """The calls that can have unacknowledged events of this failed writer: from the first
        that can have events in its oldest block unacknowledged (checked at the next
        ``advance``)."""
        if (session.in_flight or session.open_events) and self._futures:
            oldest = session.in_flight[0][BLOCK_CALL] if session.in_flight else session.open_call
            assert session.failure is not None
            self._failures[id(session)] = (oldest, session.failure)

    def _fail_calls(self) -> None:
        """Fail each pending call that gave a writer failed since the last check an event it
        has not had acknowledged: a call numbered from the first that can have one in the
        writer's oldest unacknowledged block (events of a writer are numbered in the order of
        the calls). One pass over the pending calls' writers for all those that failed
        together (a lost connection fails them all)."""
        failures, self._failures = self._failures, {}
        first = min(call for call, _ in failures.values())
        for number, writers in self._writers.items():
            future = self._futures.get(number)
            if number < first or future is None or future.done():
                continue
            for session in writers:
                failure = failures.get(id(session))
                if failure is not None and number >= failure[0]:
                    future.set_exception(failure[1])
                    break
