"""The blocking event writer: ``write_event`` into a local buffer, batches to the I/O loop.

Responsibility: ``EventWriter`` is what ``StreamManager.create_writer`` gives. ``write_event``
returns at once: the event goes into a buffer of the writer (a deque: several threads may write
to one writer), with no thread hop, future or lock per event. The buffer is handed to the I/O
loop (``IoLoop``) in batches, when ``batch_events`` events or ``batch_bytes`` bytes are
waiting, and otherwise ``linger_ms`` after the first event of a batch (as Kafka's producer
does); there one task passes each batch to ``AsyncEventWriter.write_batch_parts``, in order,
which routes the events by key and appends them (durable once acknowledged; per routing key in
order, across scaling and reconnects). Each segment's part of a batch counts as durable by
itself: a segment whose node is silent holds back only its own events. ``flush()`` hands over
what is buffered and waits until everything written before it is durable.

Back-pressure: at most ``pending_events_max`` events and ``pending_bytes_max`` bytes are
buffered or unacknowledged; ``write_event`` then waits for room (the memory a writer holds is
bounded by that, plus one batch; the counts take no lock, so with several writing threads the
bound is approximate). A batch that fails (the stream was sealed, the segment store stayed away
beyond the writer's reconnect time) makes the next ``write_event`` or ``flush`` raise its
error; the events of that batch are not durable. ``callback=`` on ``write_event`` gives one
event a completion callback, called on the I/O thread: ``callback(None)`` once the event is
durable (with the events of its batch), ``callback(error)`` if its batch failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from millrace.client.events import EVENT_BYTES_MAX
from millrace.client.transport.io_loop import IoLoop, log
from millrace.client.writer import AsyncEventWriter
from millrace.kernel import defaults

__all__ = ["EventWriter", "WriterOptions"]

#: A callback in the buffer (in the place of an event's bytes).
_CALLBACK = object()
#: Events the I/O loop takes from the buffer at once (it yields to its I/O between takes).
TAKE_EVENTS_MAX = 8192


@dataclass(frozen=True)
class WriterOptions:
    """How the blocking writer batches and bounds what it holds."""

    #: A batch goes to the I/O loop once it holds this many events ...
    batch_events: int = 2048
    #: ... or this many bytes ...
    batch_bytes: int = 1024 * 1024
    #: ... or this long after its first event.
    linger_ms: float = 2.0
    #: Events buffered or not yet acknowledged beyond which ``write_event`` waits.
    pending_events_max: int = 200_000
    #: Bytes likewise.
    pending_bytes_max: int = 64 * 1024 * 1024
    #: Seconds events may be refused by the segment store (its tier-1 cannot write, its disk
    #: is nearly full) before they fail: ``flush`` then raises ``DeliveryTimeoutError``.
    delivery_timeout_s: float = defaults.DELIVERY_TIMEOUT_SECONDS

    def validate(self) -> None:
        for name in ("batch_events", "batch_bytes", "pending_events_max", "pending_bytes_max"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if not 0 <= self.linger_ms <= 60_000:
            raise ValueError(f"linger_ms must be within 0..60000, not {self.linger_ms}")


class EventWriter:
    """Blocking writer of one stream (see the module's docstring). A context manager: leaving
    the ``with`` block flushes and closes it."""

    def __init__(self, io: IoLoop, writer: AsyncEventWriter, options: WriterOptions) -> None:
        options.validate()
        self._io, self._writer, self.options = io, writer, options
        self._batch_events, self._batch_bytes = options.batch_events, options.batch_bytes
        #: Events waiting for the I/O loop: ``(bytes, routing key)``, or ``(_CALLBACK, fn)``.
        self._buffer: deque[tuple[Any, Any]] = deque()
        #: Events and bytes written since the last hand-over, and before it (counted by the
        #: writing threads), and those acknowledged or failed (counted on the I/O thread): the
        #: writer holds the difference.
        self._count = 0
        self._bytes = 0
        self._added = self._added_bytes = 0
        self._done = self._done_bytes = 0
        self._room = threading.Event()
        self._error: BaseException | None = None
        self._closed = False
        self._wake: asyncio.Event | None = None
        #: Set by the pump each time it has taken what it found (``flush`` waits on it).
        self._pumped: asyncio.Event | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._idle = threading.Event()
        self._idle.set()
        io.run(self._start())
        io.on_exit(self, self._close_at_exit)

    async def _start(self) -> None:
        self._wake = asyncio.Event()
        self._pumped = asyncio.Event()
        self._pump_task = asyncio.get_running_loop().create_task(self._pump())

    # -- the writing thread ---------------------------------------------------------------------

    def write_event(
        self,
        event: bytes | str,
        routing_key: str | None = None,
        callback: Callable[[BaseException | None], object] | None = None,
    ) -> None:
        """Buffer ``event`` (UTF-8 for a ``str``) under ``routing_key``; returns at once unless
        the writer holds its limit of events (then it waits for room)."""
        if type(event) is not bytes:
            event = event.encode("utf-8") if isinstance(event, str) else bytes(event)
        n = len(event)
        if n > EVENT_BYTES_MAX:
            raise ValueError(f"an event holds at most {EVENT_BYTES_MAX} bytes, not {n}")
        self._buffer.append((event, routing_key))
        count = self._count = self._count + 1
        size = self._bytes = self._bytes + n
        if callback is not None:
            self._buffer.append((_CALLBACK, callback))
        if count == 1:
            self._io.call(self._linger)
        elif count >= self._batch_events or size >= self._batch_bytes:
            self._hand_over()

    def write_events(self, events: list[bytes | str], routing_key: str | None = None) -> None:
        """``write_event`` of each, in order."""
        for event in events:
            self.write_event(event, routing_key)

    def _tally(self) -> None:
        """Count the events written since the last hand-over into the totals."""
        self._added += self._count
        self._added_bytes += self._bytes
        self._count = self._bytes = 0

    def _hand_over(self) -> None:
        """Wake the I/O loop for the buffer; wait while the writer holds its limit."""
        self._tally()
        self._io.call(self._wake_pump)
        if self._error is not None:
            self._raise()
        while self._held_events() >= self.options.pending_events_max or (
            self._held_bytes() >= self.options.pending_bytes_max
        ):
            self._room.clear()
            if self._held_events() < self.options.pending_events_max and (
                self._held_bytes() < self.options.pending_bytes_max
            ):
                break
            self._room.wait(0.1)
            if self._error is not None:
                self._raise()

    @property
    def pending_events(self) -> int:
        """Events written and not yet durable (buffered, or sent and not acknowledged)."""
        return self._held_events()

    def _held_events(self) -> int:
        return self._added + self._count - self._done

    def _held_bytes(self) -> int:
        return self._added_bytes + self._bytes - self._done_bytes

    def _raise(self) -> None:
        error, self._error = self._error, None
        assert error is not None
        raise error

    def flush(self) -> None:
        """Hand over what is buffered and wait until every event written before is durable;
        raises the error of a batch that failed."""
        self._tally()
        self._io.run(self._flush())
        if self._error is not None:
            self._raise()

    def note_time(self, timestamp_ms: int) -> None:
        """Report that every event written so far has a time before ``timestamp_ms`` (ms;
        Pravega's ``noteTime``): waits until they are durable, then sends the time with the
        writer's position. Readers see the stream's watermarks made of these
        (``GroupReader.current_time_window``)."""
        self._tally()
        self._io.run(self._note_time(timestamp_ms))
        if self._error is not None:
            self._raise()

    def close(self) -> None:
        """Flush, then release the writer's connections."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._io.forget(self)
            self._io.run(self._close())

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the I/O loop ---------------------------------------------------------------------------

    def _linger(self) -> None:
        linger = self.options.linger_ms / 1000
        asyncio.get_running_loop().call_later(linger, self._wake_pump)

    def _wake_pump(self) -> None:
        assert self._wake is not None
        self._wake.set()

    async def _pump(self) -> None:
        """Take the buffer in batches and hand each to the async writer, in order."""
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._idle.clear()
            try:
                while self._buffer:
                    await self._take(min(len(self._buffer), TAKE_EVENTS_MAX))
                    await asyncio.sleep(0)  # the acks and the sends of what was taken
            except Exception as exc:  # (a bug, not a failed batch): the next call raises it
                log.exception("millrace client: the writer's hand-over failed")
                if self._error is None:
                    self._error = exc
            finally:
                self._idle.set()
                assert self._pumped is not None
                self._pumped.set()

    async def _take(self, count: int) -> None:
        pop = self._buffer.popleft
        items = [pop() for _ in range(count)]
        #: Each callback with the routing key of its event (the one just before it).
        callbacks: list[tuple[str | None, Callable[[BaseException | None], object]]] = []
        if any(item[0] is _CALLBACK for item in items):
            callbacks = [
                (items[i - 1][1], fn) for i, (kind, fn) in enumerate(items) if kind is _CALLBACK
            ]
            items = [item for item in items if item[0] is not _CALLBACK]
        events = [item[0] for item in items]
        keys = [item[1] for item in items]
        try:
            parts = await self._writer.write_batch_parts(events, keys)
        except BaseException as exc:
            self._failed(exc, len(events), sum(map(len, events)))
            for _, fn in callbacks:
                _call(fn, exc)
            return
        # Each segment's part counts as durable on its own: a segment whose node is silent
        # holds back only its own events (and the room they take), never the others'.
        for part in parts:
            part.done.add_done_callback(
                lambda f, n=part.events, size=part.size: self._batch_done(f, n, size)  # type: ignore[misc]
            )
        if callbacks:
            # A callback runs once its event's segment part is durable (an event without a
            # routing key went to any segment: once all are).
            by_key: dict[str | None, asyncio.Future[Any]] = {
                key: part.done for part in parts for key in part.keys if key is not None
            }
            for key, fn in callbacks:
                if key not in by_key:
                    by_key[key] = asyncio.gather(*(part.done for part in parts))
                by_key[key].add_done_callback(lambda f, fn=fn: _call(fn, _error_of(f)))  # type: ignore[misc]

    def _batch_done(self, done: asyncio.Future[None], events: int, size: int) -> None:
        error = _error_of(done)
        if error is not None:
            self._failed(error, events, size)
            return
        self._done += events
        self._done_bytes += size
        self._room.set()

    def _failed(self, error: BaseException, events: int, size: int) -> None:
        if self._error is None:
            self._error = error
        self._done += events
        self._done_bytes += size
        self._room.set()

    async def _handed_over(self) -> None:
        """Until the buffer is handed to the async writer (woken by the pump, not polled: a
        lone event's ``flush`` waits no longer than its hand-over)."""
        assert self._wake is not None and self._pumped is not None
        while self._buffer or not self._idle.is_set():
            self._pumped.clear()
            self._wake.set()
            await self._pumped.wait()

    async def _flush(self) -> None:
        await self._handed_over()
        await self._writer.flush()

    async def _note_time(self, timestamp_ms: int) -> None:
        await self._handed_over()
        await self._writer.note_time(timestamp_ms)

    async def _close(self) -> None:
        if self._pump_task is not None:
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump_task
        await self._writer.close()

    async def _close_at_exit(self) -> None:
        """At interpreter exit: flush what can be flushed, say what was not."""
        self._tally()
        waiting = self._held_events()
        try:
            await asyncio.wait_for(self._flush(), 5.0)
        except BaseException as exc:
            log.warning(
                "millrace client: a writer of %s/%s was not closed; %d events were not "
                "flushed (%s)",
                self._writer.scope,
                self._writer.stream,
                waiting,
                type(exc).__name__,
            )
        else:
            if waiting:
                log.warning(
                    "millrace client: a writer of %s/%s was not closed; its %d buffered events "
                    "were flushed at exit",
                    self._writer.scope,
                    self._writer.stream,
                    waiting,
                )
        with contextlib.suppress(BaseException):
            await self._close()


def _error_of(future: asyncio.Future[None]) -> BaseException | None:
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception()


def _call(fn: Callable[[BaseException | None], object], error: BaseException | None) -> None:
    try:
        fn(error)
    except Exception:
        log.exception("millrace client: a write_event callback raised")
