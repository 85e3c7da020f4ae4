"""A per-log writer thread: runs blocking calls in order, with a cheaper hop than ``to_thread``.

Responsibility: hand ``_do_append_batch`` calls of one ``FileDurableDataLog`` to one dedicated
daemon thread and complete an asyncio future from it. ``asyncio.to_thread`` goes through a
thread pool, a ``concurrent.futures`` future and a context copy; for a log that makes thousands
of small fdatasync'ed writes a second, that hop costs about as much as the write itself. The
thread stops after ``idle_seconds`` without work (abandoned logs leave no thread behind) and
starts again on the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["SerialThread"]

_Item = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class SerialThread:
    """Runs submitted calls one at a time, in submission order, on one daemon thread."""

    def __init__(self, name: str, idle_seconds: float = 1.0) -> None:
        self.name = name
        self.idle_seconds = idle_seconds
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Queue ``fn(*args)``; the returned future (of the running loop) gets its outcome."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            self._queue.put((loop, future, fn, args))
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name=self.name, daemon=True).start()
        return future

    def _run(self) -> None:
        while True:
            try:
                loop, future, fn, args = self._queue.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._running = False
                        return
                continue
            try:
                result = fn(*args)
            except BaseException as error:  # handed to the awaiting coroutine
                _complete(loop, future, None, error)
            else:
                _complete(loop, future, result, None)


def _complete(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    error: BaseException | None,
) -> None:
    def settle() -> None:
        if future.done():  # cancelled meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        loop.call_soon_threadsafe(settle)
