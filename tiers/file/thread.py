"""A per-log writer thread: runs blocking calls in order, with a cheaper hop than ``to_thread``.

Responsibility: hand ``_do_append_batch`` calls of one ``FileDurableDataLog`` to one dedicated
daemon thread and complete an asyncio future from it. ``asyncio.to_thread`` goes through a
thread pool, a ``concurrent.futures`` future and a context copy; for a log that makes thousands
of small fdatasync'ed writes a second, that hop costs about as much as the write itself. The
thread stops after ``idle_seconds`` without work (abandoned logs leave no thread behind) and
starts again on the next call.

Group commit across calls: a call submitted with ``merge=True`` takes one list and returns one
list of results, one per item (``_do_append_batch``: frames in, addresses out). When several
such calls of the same function are waiting, the thread makes one call of their lists joined
and hands each caller its part of the results: one write and one fdatasync for all the frames
that queued up during the previous one, however many producers sent them.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["SerialThread"]

_Item = tuple[
    asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...], bool
]
#: Most calls joined into one.
MERGE_CALLS_MAX = 256


class SerialThread:
    """Runs submitted calls one at a time, in submission order, on one daemon thread."""

    def __init__(self, name: str, idle_seconds: float = 1.0) -> None:
        self.name = name
        self.idle_seconds = idle_seconds
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = False

    def submit(
        self, fn: Callable[..., Any], *args: Any, merge: bool = False
    ) -> asyncio.Future[Any]:
        """Queue ``fn(*args)``; the returned future (of the running loop) gets its outcome.
        ``merge``: ``fn`` takes one list and returns one result per item; waiting calls of the
        same ``fn`` may be joined into one (see the module docstring)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            self._queue.put((loop, future, fn, args, merge))
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name=self.name, daemon=True).start()
        return future

    def _run(self) -> None:
        held: _Item | None = None
        while True:
            if held is not None:
                item, held = held, None
            else:
                try:
                    item = self._queue.get(timeout=self.idle_seconds)
                except queue.Empty:
                    with self._lock:
                        if self._queue.empty():
                            self._running = False
                            return
                    continue
            loop, future, fn, args, merge = item
            if not merge:
                _call(loop, future, fn, args)
                continue
            group = [item]
            while len(group) < MERGE_CALLS_MAX:
                try:
                    following = self._queue.get_nowait()
                except queue.Empty:
                    break
                if following[4] and _same(following[2], fn):
                    group.append(following)
                else:
                    held = following  # (run next, in order)
                    break
            if len(group) == 1:
                _call(loop, future, fn, args)
            else:
                _call_merged(fn, group)


def _same(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    """The same function of the same object (bound methods are made anew at each access)."""
    return getattr(a, "__func__", a) is getattr(b, "__func__", b) and getattr(
        a, "__self__", None
    ) is getattr(b, "__self__", None)


def _call(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    try:
        result = fn(*args)
    except BaseException as error:  # handed to the awaiting coroutine
        _complete(loop, future, None, error)
    else:
        _complete(loop, future, result, None)


def _call_merged(fn: Callable[..., Any], group: list[_Item]) -> None:
    """One call of the group's lists joined; each caller gets its part of the results (or the
    error, all of them)."""
    joined = [entry for item in group for entry in item[3][0]]
    try:
        results = fn(joined)
    except BaseException as error:
        for loop, future, *_ in group:
            _complete(loop, future, None, error)
        return
    start = 0
    for loop, future, _, args, _ in group:
        end = start + len(args[0])
        _complete(loop, future, results[start:end], None)
        start = end


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
