"""A blocking wrapper of the segment store client, for synchronous code (the controller).

``SyncSegmentStoreClient`` runs a ``SegmentStoreClient`` on an event loop thread of its own
(``IoLoop``, the thread the blocking stream client uses too); its request/response methods
block until the answer, ``append_block`` until the events are queued (its future completes on
their acknowledgement).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from millrace.client.transport.io_loop import IoLoop
from millrace.client.transport.segment_store import AppendAck, SegmentStoreClient

__all__ = ["SyncSegmentStoreClient"]

T = TypeVar("T")


class SyncSegmentStoreClient:
    """Blocking wrapper: the async client runs on an ``IoLoop`` of its own."""

    def __init__(self, host: str, port: int, *, timeout: float = 60.0, **kwargs: Any) -> None:
        self.timeout = timeout
        self._io = IoLoop(name="millrace-segment-store-client")
        try:
            self._client = self._run(SegmentStoreClient.connect(host, port, **kwargs))
        except BaseException:
            self._io.stop()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._io.run(coro, self.timeout)

    def __getattr__(self, name: str) -> Any:
        """The request/response methods of the async client, made blocking."""
        if name in _SYNC_METHODS:
            method = getattr(self._client, name)
            return functools.wraps(method)(lambda *a, **kw: self._run(method(*a, **kw)))
        raise AttributeError(name)

    def append_block(
        self, writer_id: uuid.UUID, events: bytes | Sequence[bytes], *, raw: bool = False
    ) -> concurrent.futures.Future[AppendAck]:
        """Blocks until the events are queued; the returned future completes on their ack."""
        result: concurrent.futures.Future[AppendAck] = concurrent.futures.Future()

        async def submit() -> None:
            ack = await self._client.append_block(writer_id, events, raw=raw)
            ack.add_done_callback(functools.partial(_copy_outcome, result))

        self._run(submit())
        return result

    def table(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A table-segment call (``TableCalls.<method>``: ``"update"``, ``"get"`` ...)."""
        if method not in _TABLE_METHODS:
            raise AttributeError(method)
        return self._run(getattr(self._client.tables, method)(*args, **kwargs))

    def all_at_once(
        self, method: str, calls: Sequence[tuple[tuple[Any, ...], str | None]]
    ) -> list[BaseException | None]:
        """The request/response ``method`` (``"merge"``, ``"create_segment"`` ...) once per
        ``(arguments, token)``, all in flight at once; each one's error, or None."""
        if method not in _SYNC_METHODS:
            raise AttributeError(method)
        call = getattr(self._client, method)

        async def together() -> list[BaseException | None]:
            outcomes = await asyncio.gather(
                *(call(*args, token=token) for args, token in calls), return_exceptions=True
            )
            return [o if isinstance(o, BaseException) else None for o in outcomes]

        return self._run(together())

    def close(self) -> None:
        try:
            self._run(self._client.close())
        finally:
            self._io.stop()

    def __enter__(self) -> SyncSegmentStoreClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_SYNC_METHODS = frozenset(
    {
        "create_segment", "get_info", "read_segment", "seal", "truncate", "delete", "merge",
        "get_attribute", "update_attribute", "setup_append", "flush", "conditional_append",
        "locate_offset",
    }
)  # fmt: skip


_TABLE_METHODS = frozenset({"create", "delete", "info", "update", "remove", "get", "entries"})


def _copy_outcome(target: concurrent.futures.Future[T], source: asyncio.Future[T]) -> None:
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())
