"""``StreamManager``: the entry point of the Python client, as in Pravega's Python client.

    manager = StreamManager("http://127.0.0.1:9091", token=open("data/admin-token").read().strip())
    manager.create_scope("demo")
    manager.create_stream("demo", "orders", initial_segments=3)
    writer = manager.create_writer("demo", "orders")
    writer.write_event(b"order 1", routing_key="customer-7")
    writer.flush()  # durable

``AsyncStreamManager`` is the same on asyncio. The blocking API runs the asyncio one on a
private event loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from millrace.client.byte_stream import AsyncByteStream
from millrace.client.controller import AsyncControllerClient
from millrace.client.reader import AsyncEventReader, EventRead, cut_of
from millrace.client.reader_group import AsyncGroupReader, AsyncReaderGroup
from millrace.client.streamcut import StreamCut
from millrace.client.transactions import AsyncTransactionalWriter, Transaction
from millrace.client.writer import AsyncEventWriter

T = TypeVar("T")


class AsyncStreamManager:
    """Scopes, streams and writers, on asyncio."""

    def __init__(self, controller_uri: str, token: str = "") -> None:
        self.controller = AsyncControllerClient(controller_uri, token)

    async def create_scope(self, scope: str) -> bool:
        return await self.controller.create_scope(scope)

    async def delete_scope(self, scope: str) -> None:
        await self.controller.delete_scope(scope)

    async def create_stream(self, scope: str, stream: str, initial_segments: int = 1) -> bool:
        return await self.controller.create_stream(scope, stream, initial_segments)

    async def seal_stream(self, scope: str, stream: str) -> None:
        await self.controller.seal_stream(scope, stream)

    async def delete_stream(self, scope: str, stream: str) -> None:
        await self.controller.delete_stream(scope, stream)

    def create_writer(self, scope: str, stream: str, **options: Any) -> AsyncEventWriter:
        return AsyncEventWriter(self.controller, scope, stream, **options)

    def create_reader(self, scope: str, stream: str, **options: Any) -> AsyncEventReader:
        """A reader of the whole stream (``start="head"`` or ``"tail"``)."""
        return AsyncEventReader(self.controller, scope, stream, **options)

    def create_transaction_writer(self, scope: str, stream: str) -> AsyncTransactionalWriter:
        return AsyncTransactionalWriter(self.controller, scope, stream)

    async def create_reader_group(
        self,
        scope: str,
        group: str,
        streams: list[str] | dict[str, str | StreamCut],
        **options: Any,
    ) -> AsyncReaderGroup:
        """Create (or open, when it exists with the same configuration) reader group
        ``scope/group`` over ``streams`` (``"scope/stream"`` names; a list starts each at
        ``start``, default ``"head"``; a dict gives each its start: head, tail or a cut).
        Options: ``start``, ``retention_type``, ``reader_timeout_ms``,
        ``group_refresh_time_ms``."""
        return await AsyncReaderGroup.create(self.controller, scope, group, streams, **options)

    def reader_group(self, scope: str, group: str) -> AsyncReaderGroup:
        """An existing reader group."""
        return AsyncReaderGroup(self.controller, scope, group)

    async def create_byte_stream(self, scope: str, stream: str) -> AsyncByteStream:
        """The byte stream ``scope/stream``, created (one segment) if it does not exist."""
        await self.controller.create_stream(scope, stream, initial_segments=1)
        return await AsyncByteStream.open(self.controller, scope, stream)

    async def get_stream_cut(self, scope: str, stream: str, at: str | int = "tail") -> StreamCut:
        """The head (``"head"``), the tail (``"tail"``) or the position at a time (ms)."""
        where = str(at)
        if where not in ("head", "tail") and not where.isdigit():
            raise ValueError("at is head, tail or a time in ms")
        cut = await cut_of(self.controller, scope, stream, where)
        return StreamCut(scope, stream, {sid: off for sid, (_, off) in cut.items()})

    async def close(self) -> None:
        await self.controller.close()


class _Loop:
    """An event loop on a daemon thread; ``run`` blocks on a coroutine there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="millrace-client")  # fmt: skip
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class EventWriter:
    """Blocking facade of ``AsyncEventWriter``."""

    def __init__(self, loop: _Loop, writer: AsyncEventWriter) -> None:
        self._loop, self._writer = loop, writer

    def write_event(
        self, event: bytes | str, routing_key: str | None = None
    ) -> concurrent.futures.Future[None]:
        """Queue the event (waits only for room); the future completes once it is durable."""
        result: concurrent.futures.Future[None] = concurrent.futures.Future()

        async def submit() -> None:
            done = await self._writer.write_event(event, routing_key)
            done.add_done_callback(lambda f: _copy(f, result))

        self._loop.run(submit())
        return result

    def write_events(
        self, events: list[bytes | str], routing_key: str | None = None
    ) -> concurrent.futures.Future[None]:
        """Queue several events of one routing key, in order; one future for all of them."""
        result: concurrent.futures.Future[None] = concurrent.futures.Future()

        async def submit() -> None:
            done = await self._writer.write_events(events, routing_key)
            done.add_done_callback(lambda f: _copy(f, result))

        self._loop.run(submit())
        return result

    def flush(self) -> None:
        self._loop.run(self._writer.flush())

    def close(self) -> None:
        self._loop.run(self._writer.close())


class EventReader:
    """Blocking facade of ``AsyncEventReader``."""

    def __init__(self, loop: _Loop, reader: AsyncEventReader) -> None:
        self._loop, self._reader = loop, reader

    def read_next(self, timeout: float | None = None) -> EventRead | None:
        """The next event, ``None`` at the end of a sealed stream; ``TimeoutError`` after
        ``timeout`` seconds without one."""
        return self._loop.run(self._reader.read_next(timeout))

    def close(self) -> None:
        self._loop.run(self._reader.close())


class ReaderGroup:
    """Blocking facade of ``AsyncReaderGroup``."""

    def __init__(self, loop: _Loop, group: AsyncReaderGroup) -> None:
        self._loop, self._group = loop, group
        self.scope, self.name = group.scope, group.name

    def create_reader(self, reader_id: str | None = None, **options: Any) -> GroupReader:
        return GroupReader(
            self._loop, self._loop.run(self._group.create_reader(reader_id, **options))
        )

    def initiate_checkpoint(self, name: str, timeout: float = 60.0) -> dict[str, StreamCut]:
        return self._loop.run(self._group.initiate_checkpoint(name, timeout))

    def reset(self, streams: dict[str, str | StreamCut] | None = None) -> None:
        self._loop.run(self._group.reset(streams))

    def describe(self) -> dict[str, Any]:
        return self._loop.run(self._group.describe())

    def update_retention_stream_cut(self, cuts: dict[str, StreamCut]) -> None:
        self._loop.run(self._group.update_retention_stream_cut(cuts))

    def delete(self) -> None:
        self._loop.run(self._group.delete())


class GroupReader:
    """Blocking facade of ``AsyncGroupReader``."""

    def __init__(self, loop: _Loop, reader: AsyncGroupReader) -> None:
        self._loop, self._reader = loop, reader
        self.reader_id = reader.reader_id

    def read_next(self, timeout: float | None = None) -> EventRead | None:
        """The next event or checkpoint marker, ``None`` once the group's streams are sealed
        and read; ``TimeoutError`` after ``timeout`` s without one."""
        return self._loop.run(self._reader.read_next(timeout))

    def close(self) -> None:
        self._loop.run(self._reader.close())


class ByteStream:
    """Blocking facade of ``AsyncByteStream`` (file-like: write, read, seek, tell)."""

    def __init__(self, loop: _Loop, stream: AsyncByteStream) -> None:
        self._loop, self._stream = loop, stream

    def write(self, data: bytes) -> int:
        return self._loop.run(self._stream.write(data))

    def write_conditional(self, data: bytes, expected_offset: int) -> int:
        return self._loop.run(self._stream.write_conditional(data, expected_offset))

    def flush(self) -> None:
        self._loop.run(self._stream.flush())

    def read(self, size: int = 1024 * 1024, timeout: float | None = None) -> bytes:
        return self._loop.run(self._stream.read(size, timeout))

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._loop.run(self._stream.seek(offset, whence))

    def tell(self) -> int:
        return self._stream.tell()

    def truncate(self, offset: int) -> None:
        self._loop.run(self._stream.truncate(offset))

    def current_head_offset(self) -> int:
        return self._loop.run(self._stream.current_head_offset())

    def current_tail_offset(self) -> int:
        return self._loop.run(self._stream.current_tail_offset())

    def seal(self) -> None:
        self._loop.run(self._stream.seal())

    def close(self) -> None:
        self._loop.run(self._stream.close())


class TransactionalWriter:
    """Blocking facade of ``AsyncTransactionalWriter``: ``begin_txn()`` gives a transaction
    whose ``write_event``, ``commit``, ``abort``, ``ping`` and ``check_status`` block."""

    def __init__(self, loop: _Loop, writer: AsyncTransactionalWriter) -> None:
        self._loop, self._writer = loop, writer

    def begin_txn(self, lease_ms: int = 30_000) -> BlockingTransaction:
        return BlockingTransaction(self._loop, self._loop.run(self._writer.begin_txn(lease_ms)))

    def close(self) -> None:
        self._loop.run(self._writer.close())


class BlockingTransaction:
    def __init__(self, loop: _Loop, txn: Transaction) -> None:
        self._loop, self.txn = loop, txn
        self.txn_id = txn.txn_id

    def write_event(self, event: bytes | str, routing_key: str | None = None) -> None:
        self._loop.run(self.txn.write_event(event, routing_key))

    def commit(self, timestamp: int | None = None) -> None:
        self._loop.run(self.txn.commit(timestamp))

    def abort(self) -> None:
        self._loop.run(self.txn.abort())

    def ping(self, lease_ms: int = 30_000) -> None:
        self._loop.run(self.txn.ping(lease_ms))

    def check_status(self) -> str:
        return self._loop.run(self.txn.check_status())


def _copy(source: asyncio.Future[None], target: concurrent.futures.Future[None]) -> None:
    if source.cancelled():
        target.cancel()
    elif (error := source.exception()) is not None:
        target.set_exception(error)
    else:
        target.set_result(None)


class StreamManager:
    """Scopes, streams and writers, blocking (Pravega's Python client names)."""

    def __init__(self, controller_uri: str, token: str = "") -> None:
        self._loop = _Loop()
        self._async = self._loop.run(_make(controller_uri, token))

    def create_scope(self, scope: str) -> bool:
        return self._loop.run(self._async.create_scope(scope))

    def delete_scope(self, scope: str) -> None:
        self._loop.run(self._async.delete_scope(scope))

    def create_stream(self, scope: str, stream: str, initial_segments: int = 1) -> bool:
        return self._loop.run(self._async.create_stream(scope, stream, initial_segments))

    def seal_stream(self, scope: str, stream: str) -> None:
        self._loop.run(self._async.seal_stream(scope, stream))

    def delete_stream(self, scope: str, stream: str) -> None:
        self._loop.run(self._async.delete_stream(scope, stream))

    def create_writer(self, scope: str, stream: str, **options: Any) -> EventWriter:
        return EventWriter(self._loop, self._async.create_writer(scope, stream, **options))

    def create_reader(self, scope: str, stream: str, **options: Any) -> EventReader:
        return EventReader(self._loop, self._async.create_reader(scope, stream, **options))

    def create_transaction_writer(self, scope: str, stream: str) -> TransactionalWriter:
        return TransactionalWriter(self._loop, self._async.create_transaction_writer(scope, stream))

    def get_stream_cut(self, scope: str, stream: str, at: str | int = "tail") -> StreamCut:
        """The head (``"head"``), the tail (``"tail"``) or the position at a time (ms)."""
        return self._loop.run(self._async.get_stream_cut(scope, stream, at))

    def create_reader_group(
        self,
        scope: str,
        group: str,
        streams: list[str] | dict[str, str | StreamCut],
        **options: Any,
    ) -> ReaderGroup:
        """As ``AsyncStreamManager.create_reader_group``."""
        created = self._loop.run(self._async.create_reader_group(scope, group, streams, **options))
        return ReaderGroup(self._loop, created)

    def reader_group(self, scope: str, group: str) -> ReaderGroup:
        return ReaderGroup(self._loop, self._async.reader_group(scope, group))

    def create_byte_stream(self, scope: str, stream: str) -> ByteStream:
        """As ``AsyncStreamManager.create_byte_stream``."""
        return ByteStream(self._loop, self._loop.run(self._async.create_byte_stream(scope, stream)))

    def close(self) -> None:
        self._loop.run(self._async.close())
        self._loop.stop()


async def _make(uri: str, token: str) -> AsyncStreamManager:
    return AsyncStreamManager(uri, token)  # httpx's client belongs to the loop it is made on
