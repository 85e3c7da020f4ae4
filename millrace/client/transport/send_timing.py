"""When a writer's open block goes: at once when full, after its linger, on the next loop turn,
or later while its connection is busy.

Responsibility: ``SendTiming`` decides, for the append sessions of one connection
(``appends``), when each writer's open block is due (``Session.send_due``) and calls ``pump``
then: a full block at once; a small block of a writer with a block in flight on its next ack; on
a busy connection (many events a second and many blocks unanswered, judged each
``BUSY_WINDOW_S`` by ``BusyWindow``) after ``AppendLimits.busy_linger_ms``, sent in order by one
sweep timer for every lingering writer; otherwise after ``linger_ms``, or on the next loop turn
(one callback for all writers queued in the same turn) when it is 0.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from collections.abc import Callable

from millrace.client.transport.append_blocks import AppendLimits, Session
from millrace.client.transport.completion import CompletionOrder

__all__ = ["BUSY_SWEEP_S", "BUSY_WINDOW_S", "BusyWindow", "SendTiming"]

#: How often a connection judges whether it is busy (``AppendLimits.busy_blocks``).
BUSY_WINDOW_S = 0.1
#: How often a busy connection sends the blocks whose linger ended.
BUSY_SWEEP_S = 0.02


@dataclasses.dataclass(slots=True)
class BusyWindow:
    """Whether a connection is busy (``AppendLimits.busy_blocks``), judged each BUSY_WINDOW_S
    from the events handed to it in the window (not those sent: lingering blocks go in
    bursts)."""

    busy: bool = False
    start: float = 0.0
    events: int = 0

    def judge(self, limits: AppendLimits, blocks_unanswered: int) -> bool:
        now = time.monotonic()
        if now - self.start >= BUSY_WINDOW_S:
            rate = self.events / (now - self.start)
            self.busy = (
                limits.busy_linger_ms > 0
                and rate >= limits.busy_events_per_s
                and blocks_unanswered >= limits.busy_blocks
            )
            self.start, self.events = now, 0
        return self.busy


class SendTiming:
    """The timers of one connection's open blocks; ``pump`` sends a writer's block when due."""

    def __init__(
        self, limits: AppendLimits, order: CompletionOrder, pump: Callable[[Session], None]
    ) -> None:
        self.limits = limits
        self._order = order
        self._pump = pump
        #: Whether the connection is busy; ``events`` counts what callers hand over.
        self.window = BusyWindow()
        #: Writers whose open block goes on the next loop turn (``linger_ms`` 0).
        self._next_turn: list[Session] = []
        #: Writers whose block lingers because the connection is busy, in the order their
        #: lingers end, and the timer of the next ``_sweep``.
        self._lingering: collections.deque[Session] = collections.deque()
        self._sweeper: asyncio.TimerHandle | None = None

    def schedule(self, session: Session) -> None:
        """Events were added to the session's open block: send it now, or set when."""
        limits = self.limits
        if session.open_full(limits):
            session.send_due = True
            self._pump(session)
            return
        busy = self.window.judge(limits, len(self._order.order))
        if busy and session.open_events and not (session.linger or session.busy_until):
            session.send_due = True  # (an ack meanwhile does not send it, see ``pump``)
            session.busy_until = time.monotonic() + limits.busy_linger_ms / 1000
            self._lingering.append(session)
            if self._sweeper is None:
                loop = asyncio.get_running_loop()
                self._sweeper = loop.call_later(BUSY_SWEEP_S, self._sweep)
            return
        if session.in_flight and session.block_bytes() < limits.small_block_bytes:
            session.send_due = True  # held: the next ack sends it (see ``pump``)
        elif session.linger is None and not session.next_turn and session.open_events:
            loop = asyncio.get_running_loop()
            delay = limits.linger_ms / 1000
            if delay > 0:
                session.linger = loop.call_later(delay, self._linger_expired, session)
            else:  # the next loop turn: one callback for all the writers queued in this one
                session.next_turn = True
                self._next_turn.append(session)
                if len(self._next_turn) == 1:
                    loop.call_soon(self._send_next_turn)

    def _send_next_turn(self) -> None:
        queued, self._next_turn = self._next_turn, []
        for session in queued:
            if session.next_turn:  # (not sent meanwhile)
                self._linger_expired(session)

    def _sweep(self) -> None:
        """Send the blocks whose busy linger ended (they are in that order), and come again
        while any is left."""
        self._sweeper = None
        lingering = self._lingering
        now = time.monotonic()
        while lingering and lingering[0].busy_until <= now:
            session = lingering.popleft()
            if session.busy_until:  # (else: sent meanwhile)
                session.busy_until = 0.0
                session.send_due = True
                self._pump(session)
        if lingering:
            self._sweeper = asyncio.get_running_loop().call_later(BUSY_SWEEP_S, self._sweep)

    def _linger_expired(self, session: Session) -> None:
        session.linger = None
        session.next_turn = False
        session.send_due = True
        self._pump(session)
