"""The I/O thread of the blocking clients: one event loop on a daemon thread (uvloop where
installed, as ``MILLRACE_EVENT_LOOP`` says: ``millrace.kernel.event_loop``).

Responsibility: ``IoLoop`` runs the asyncio client for a ``StreamManager`` and the objects it
creates, and for a ``SyncSegmentStoreClient``. ``run`` blocks the calling thread on a coroutine
there; ``call`` schedules a plain callback (no coroutine, no future: what the writer's hand-over of
a batch costs). Objects that must be shut down when the interpreter exits register a closer
(``on_exit``); those still open then are closed quietly, each in a bounded time, with one warning
naming what was not flushed. So that this happens when the program is stopped with SIGTERM
(``kill``, systemd, Kubernetes) too, and a reader leaves its group at once instead of after the
group's reader timeout, the first ``IoLoop`` turns SIGTERM into ``SystemExit`` (exit status
143), but only where the program left SIGTERM's default in place and only from the main thread.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import signal
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from millrace.kernel.event_loop import event_loop_factory

__all__ = ["EXIT_CLOSE_SECONDS", "IoLoop"]

log = logging.getLogger("millrace.client")

T = TypeVar("T")

#: How long each object still open at interpreter exit may take to close.
EXIT_CLOSE_SECONDS = 10.0

_loops: weakref.WeakSet[IoLoop] = weakref.WeakSet()


class IoLoop:
    """An event loop on a daemon thread."""

    def __init__(self, name: str = "millrace-client") -> None:
        self.loop = event_loop_factory()()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name=name)
        self.thread.start()
        #: Closers of the objects still open, run at interpreter exit (see ``on_exit``).
        self._closers: dict[int, Callable[[], Coroutine[Any, Any, None]]] = {}
        self.stopped = False
        _loops.add(self)
        _exit_cleanly_on_sigterm()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result."""
        if self.stopped:
            coro.close()
            raise RuntimeError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop; its result comes in the future returned at once."""
        if self.stopped:
            coro.close()
            raise RuntimeError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the loop soon (from any thread)."""
        if self.stopped:
            raise RuntimeError("the client is closed")
        self.loop.call_soon_threadsafe(callback)

    def on_exit(self, owner: object, closer: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Close ``owner`` with ``closer()`` at interpreter exit unless ``forget`` came first."""
        self._closers[id(owner)] = closer

    def forget(self, owner: object) -> None:
        self._closers.pop(id(owner), None)

    def shut(self, owner: object, closer: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Close a client's entry point (``owner``, closed by ``closer()``) for good: what it
        opened and still open first, then it, then the loop."""
        if self.stopped:
            return
        self.forget(owner)
        self.close_open()
        self.run(closer())
        self.stop()

    def stop(self) -> None:
        """Cancel the tasks left (a reader's fetches, say) and stop the thread."""
        if self.stopped:
            return
        try:
            self.run(_cancel_tasks(), EXIT_CLOSE_SECONDS)
        except BaseException as exc:
            log.debug("millrace client: cancelling tasks: %s", _short(exc))
        self.stopped = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()

    def close_open(self) -> None:
        """Close what is still open, each within EXIT_CLOSE_SECONDS: no traceback (the
        warning of each object says what it left)."""
        closers, self._closers = list(self._closers.values()), {}
        for closer in reversed(closers):  # the last made first (the manager last of all)
            try:
                self.run(closer(), EXIT_CLOSE_SECONDS)
            except BaseException as exc:
                log.warning("millrace client: closing what was left open failed: %s", _short(exc))

    def close_at_exit(self) -> None:
        """At interpreter exit: close what is still open, then stop."""
        self.close_open()
        self.stop()


async def _cancel_tasks() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:297] + "..."


def _exit_cleanly_on_sigterm() -> None:
    """SIGTERM raises ``SystemExit(143)`` in the main thread (the exit closes what is open),
    if the program has not chosen what SIGTERM does itself."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    signal.signal(signal.SIGTERM, _sigterm_exits)


def _sigterm_exits(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@atexit.register
def _close_all() -> None:
    for io_loop in list(_loops):
        if not io_loop.stopped:
            io_loop.close_at_exit()
