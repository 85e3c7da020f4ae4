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

import concurrent.futures
import dataclasses
import uuid
from collections.abc import (
    AsyncGenerator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, TypeVar

from millrace.client.admin import AdminCalls
from millrace.client.batch import AsyncBatchClient, SegmentRange
from millrace.client.blocking_readers import EventReader, GroupReader
from millrace.client.blocking_writer import EventWriter, WriterOptions
from millrace.client.byte_stream import AsyncByteStream
from millrace.client.controller import AsyncControllerClient
from millrace.client.events import EventRead
from millrace.client.reader import AsyncEventReader, cut_of
from millrace.client.reader_group import AsyncReaderGroup
from millrace.client.streamcut import StreamCut
from millrace.client.transactions import AsyncTransactionalWriter, Transaction
from millrace.client.transport.io_loop import IoLoop
from millrace.client.writer import AsyncEventWriter
from millrace.kernel import defaults
from millrace.kernel import rest_paths as paths

T = TypeVar("T")
_C = TypeVar("_C", bound="_Closing")


class AsyncStreamManager:
    """Scopes, streams and writers, on asyncio. ``tls`` options (``tls_ca``,
    ``validate_hostname``, ``tls_cert``/``tls_key``) go to ``AsyncControllerClient``; an
    ``https://`` URL turns TLS on."""

    def __init__(self, controller_uri: str, token: str = "", **tls: Any) -> None:
        self.controller = AsyncControllerClient(controller_uri, token, **tls)
        #: The management calls (``millrace.client.admin``) over the same controller client.
        self.admin = AdminCalls(self.controller)

    async def create_scope(self, scope: str) -> bool:
        return await self.controller.create_scope(scope)

    async def delete_scope(self, scope: str) -> None:
        await self.controller.delete_scope(scope)

    async def create_stream(
        self, scope: str, stream: str, initial_segments: int = 1, **policies: Any
    ) -> bool:
        """``policies``: ``scaling_policy`` and ``retention_policy`` as the REST API takes
        them (``{"type": "BY_RATE_IN_EVENTS_PER_SEC", "targetRate": 100, ...}``)."""
        return await self.controller.create_stream(scope, stream, initial_segments, **policies)

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

    async def list_streams(self, scope: str) -> list[str]:
        return await self.controller.list_streams(scope)

    async def get_stream_cut(self, scope: str, stream: str, at: str | int = "tail") -> StreamCut:
        """The head (``"head"``), the tail (``"tail"``) or the position at a time (ms)."""
        where = str(at)
        if where not in ("head", "tail") and not where.isdigit():
            raise ValueError("at is head, tail or a time in ms")
        cut = await cut_of(self.controller, scope, stream, where)
        return StreamCut(scope, stream, {sid: off for sid, (_, off) in cut.items()})

    async def next_stream_cut(self, cut: StreamCut, approx_bytes: int) -> tuple[StreamCut, int]:
        """The cut about ``approx_bytes`` after ``cut`` (on event boundaries, never past the
        tail) and the bytes between them, as Pravega's ``getNextStreamCut``."""
        if approx_bytes < 1:
            raise ValueError(f"approx_bytes must be positive, not {approx_bytes}")
        path = paths.stream_cut_next(cut.scope, cut.stream)
        body = {"streamCut": {str(k): v for k, v in cut.positions.items()},
                "approxBytes": approx_bytes}  # fmt: skip
        found = await self.controller.call("POST", path, body)
        positions = {int(k): int(v) for k, v in found["streamCut"].items()}
        return StreamCut(cut.scope, cut.stream, positions), int(found["bytes"])

    async def stream_schema(self, scope: str, stream: str) -> dict[str, Any]:
        """The stream's value subject in the schema registry and its enforcement mode
        (``{"subject": ..., "enforcement": "none" | "header" | "validate"}``)."""
        found: dict[str, Any] = await self.controller.call(
            "GET", paths.stream_schema(scope, stream)
        )
        return found

    async def registry(self, method: str, path: str, body: Any = None) -> Any:
        """One call to the schema registry's REST API (Confluent's: ``GET
        /schemas/ids/7``, ``POST /subjects/S/versions`` ...); its errors are ``ControllerError``
        with Confluent's numeric codes."""
        return await self.controller.call(method, path, body, api=paths.REGISTRY)

    async def close(self) -> None:
        await self.controller.close()


class _Closing:
    """A context manager that closes the object when the block is left."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ReaderGroup:
    """Blocking facade of ``AsyncReaderGroup``."""

    def __init__(self, loop: IoLoop, group: AsyncReaderGroup) -> None:
        self._loop, self._group = loop, group
        self.scope, self.name = group.scope, group.name

    def create_reader(self, reader_id: str | None = None, **options: Any) -> GroupReader:
        return GroupReader(
            self._loop, self._loop.run(self._group.create_reader(reader_id, **options))
        )

    def initiate_checkpoint(self, name: str, timeout: float = 60.0) -> dict[str, StreamCut]:
        """Checkpoint ``name``'s stream cuts, once every reader of the group has handed out
        its marker: the readers must be reading meanwhile, in other threads or processes
        (a reader in this thread: ``start_checkpoint``)."""
        return self._loop.run(self._group.initiate_checkpoint(name, timeout))

    def start_checkpoint(
        self, name: str, timeout: float = 60.0
    ) -> concurrent.futures.Future[dict[str, StreamCut]]:
        """``initiate_checkpoint`` without waiting (Pravega's ``initiateCheckpoint`` answers a
        future too): the checkpoint is asked for now, and the future gets its stream cuts once
        every reader handed out its marker, so that this thread can go on reading."""
        return self._loop.submit(self._group.initiate_checkpoint(name, timeout))

    def reset(self, streams: dict[str, str | StreamCut] | None = None) -> None:
        self._loop.run(self._group.reset(streams))

    def describe(self) -> dict[str, Any]:
        return self._loop.run(self._group.describe())

    def update_retention_stream_cut(self, cuts: dict[str, StreamCut]) -> None:
        self._loop.run(self._group.update_retention_stream_cut(cuts))

    def delete(self) -> None:
        self._loop.run(self._group.delete())


class ByteStream(_Closing):
    """Blocking facade of ``AsyncByteStream`` (file-like: write, read, seek, tell; a context
    manager)."""

    def __init__(self, loop: IoLoop, stream: AsyncByteStream) -> None:
        self._loop, self._stream = loop, stream
        loop.on_exit(self, stream.close)

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
        self._loop.forget(self)
        self._loop.run(self._stream.close())


class TransactionalWriter(_Closing):
    """Blocking facade of ``AsyncTransactionalWriter``: ``begin_txn()`` gives a transaction
    whose ``write_event``, ``commit``, ``abort``, ``ping`` and ``check_status`` block."""

    def __init__(self, loop: IoLoop, writer: AsyncTransactionalWriter) -> None:
        self._loop, self._writer = loop, writer
        loop.on_exit(self, writer.close)

    def begin_txn(
        self, lease_ms: int = defaults.TRANSACTION_LEASE_MS, writer_id: str = ""
    ) -> BlockingTransaction:
        begun = self._loop.run(self._writer.begin_txn(lease_ms, writer_id))
        return BlockingTransaction(self._loop, begun)

    def open_txn_ids(self, writer_id: str) -> list[uuid.UUID]:
        """The transactions begun with ``writer_id`` that are still open."""
        return self._loop.run(self._writer.open_txn_ids(writer_id))

    def commit_txn(
        self, txn_id: uuid.UUID, timestamp: int | None = None, *, wait: bool = True
    ) -> str:
        """Commit the transaction ``txn_id`` by its id alone (see ``AsyncTransactionalWriter.
        commit_txn``); returns its state."""
        return self._loop.run(self._writer.commit_txn(txn_id, timestamp, wait=wait))

    def commit_txns(
        self, txn_ids: Sequence[uuid.UUID], timestamp: int | None = None, *, wait: bool = True
    ) -> dict[uuid.UUID, str]:
        """Commit several transactions by id at once, all or none (see
        ``AsyncTransactionalWriter.commit_txns``); returns each one's state."""
        return self._loop.run(self._writer.commit_txns(txn_ids, timestamp, wait=wait))

    def abort_txn(self, txn_id: uuid.UUID) -> str:
        """Abort the transaction ``txn_id`` by its id alone; returns its state."""
        return self._loop.run(self._writer.abort_txn(txn_id))

    def txn_state(self, txn_id: uuid.UUID) -> str:
        """The state of the transaction ``txn_id``, by its id alone."""
        return self._loop.run(self._writer.txn_state(txn_id))

    def ping_txn(self, txn_id: uuid.UUID, lease_ms: int = defaults.TRANSACTION_LEASE_MS) -> None:
        """Extend the lease of the open transaction ``txn_id`` by its id alone."""
        self._loop.run(self._writer.ping_txn(txn_id, lease_ms))

    def get_txn(self, txn_id: uuid.UUID) -> BlockingTransaction:
        """The OPEN transaction ``txn_id``, to write to it, commit or abort it."""
        return BlockingTransaction(self._loop, self._loop.run(self._writer.get_txn(txn_id)))

    def close(self) -> None:
        self._loop.forget(self)
        self._loop.run(self._writer.close())


async def _next(items: AsyncGenerator[T, None]) -> T:
    return await anext(items)


class BatchClient(_Closing):
    """Blocking facade of ``AsyncBatchClient`` (``millrace.client.batch``): plan a stream's
    segment ranges between two cuts, read any one of them."""

    def __init__(self, loop: IoLoop, batch: AsyncBatchClient) -> None:
        self._loop, self._batch = loop, batch
        loop.on_exit(self, batch.close)

    def segment_ranges(
        self, scope: str, stream: str, start: StreamCut | None = None, end: StreamCut | None = None
    ) -> list[SegmentRange]:
        return self._loop.run(self._batch.segment_ranges(scope, stream, start, end))

    def read_range(self, segment: SegmentRange) -> Iterator[EventRead]:
        """The range's events (``EventRead``: segment name, offset, data), read by the I/O
        thread a read at a time."""
        for chunk in self._drain(self._batch.read_range(segment)):
            yield from chunk

    def read_chunks(self, segment: SegmentRange) -> Iterator[tuple[int, bytes]]:
        """The range's bytes as read, ``(offset, data)``, events possibly cut at the chunks'
        ends (for callers that split events themselves, say into Arrow arrays)."""
        return self._drain(self._batch.read_chunks(segment))

    def _drain(self, items: AsyncGenerator[T, None]) -> Iterator[T]:
        try:
            while True:
                try:
                    item = self._loop.run(_next(items))
                except StopAsyncIteration:
                    return
                yield item
        finally:
            self._loop.run(items.aclose())

    def close(self) -> None:
        self._loop.forget(self)
        self._loop.run(self._batch.close())


class BlockingTransaction:
    """One open transaction. As a context manager: committed when the block ends normally,
    aborted when it raises (unless committed or aborted already)."""

    def __init__(self, loop: IoLoop, txn: Transaction) -> None:
        self._loop, self.txn = loop, txn
        self.txn_id = txn.txn_id
        self._ended = False

    def __enter__(self) -> BlockingTransaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if self._ended:
            return
        if kind is None:
            self.commit()
        else:
            self.abort()

    def write_event(self, event: bytes | str, routing_key: str | None = None) -> None:
        self._loop.run(self.txn.write_event(event, routing_key))

    def write_events(self, events: Iterable[tuple[bytes | str, str | None]]) -> int:
        """Write many ``(event, routing key)`` pairs with one hop to the I/O thread; how many."""
        pairs = list(events)
        self._loop.run(self.txn.write_events(pairs))
        return len(pairs)

    @property
    def shadow_ranges(self) -> list[tuple[float, float]]:
        return self.txn.shadow_ranges

    def write_framed(self, parts: Mapping[int, Sequence[bytes | bytearray | memoryview]]) -> None:
        """``Transaction.write_framed`` with one hop to the I/O thread."""
        self._loop.run(self.txn.write_framed(parts))

    def flush(self) -> None:
        """Wait until every event written so far is durable in the transaction (a commit from
        elsewhere, say the console, then includes them)."""
        self._loop.run(self.txn.flush())

    def commit(self, timestamp: int | None = None, *, wait: bool = True) -> None:
        self._loop.run(self.txn.commit(timestamp, wait=wait))
        self._ended = True

    def abort(self) -> None:
        self._loop.run(self.txn.abort())
        self._ended = True

    def ping(self, lease_ms: int = defaults.TRANSACTION_LEASE_MS) -> None:
        self._loop.run(self.txn.ping(lease_ms))

    def check_status(self) -> str:
        return self._loop.run(self.txn.check_status())


class StreamManager(_Closing):
    """Scopes, streams and writers, blocking (Pravega's Python client names). A context
    manager: closing it closes the writers, readers and byte streams still open."""

    def __init__(
        self,
        controller_uri: str,
        token: str = "",
        *,
        tls_ca: str | None = None,
        validate_hostname: bool = True,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ) -> None:
        """``controller_uri``: ``http://host:9091``, or ``https://`` (``tls://``) for TLS to
        the controller and the segment store nodes, trusting ``tls_ca`` (a PEM file; default:
        the system's trust store) and checking host names unless ``validate_hostname`` is off;
        ``tls_cert``/``tls_key`` present a client certificate (mutual TLS)."""
        tls = {"tls_ca": tls_ca, "validate_hostname": validate_hostname,
               "tls_cert": tls_cert, "tls_key": tls_key}  # fmt: skip
        self._loop = IoLoop()
        self._async = self._loop.run(_make(controller_uri, token, tls))
        self._loop.on_exit(self, self._async.close)

    def create_scope(self, scope: str) -> bool:
        return self._loop.run(self._async.create_scope(scope))

    def delete_scope(self, scope: str) -> None:
        self._loop.run(self._async.delete_scope(scope))

    def create_stream(
        self, scope: str, stream: str, initial_segments: int = 1, **policies: Any
    ) -> bool:
        """As ``AsyncStreamManager.create_stream``."""
        return self._loop.run(
            self._async.create_stream(scope, stream, initial_segments, **policies)
        )

    def seal_stream(self, scope: str, stream: str) -> None:
        self._loop.run(self._async.seal_stream(scope, stream))

    def delete_stream(self, scope: str, stream: str) -> None:
        self._loop.run(self._async.delete_stream(scope, stream))

    def create_writer(self, scope: str, stream: str, **options: Any) -> EventWriter:
        """A blocking writer of ``scope/stream``; options: the fields of ``WriterOptions``
        (batching: ``batch_events``, ``batch_bytes``, ``linger_ms``; the memory bound:
        ``pending_events_max``, ``pending_bytes_max``; ``delivery_timeout_s``, how long events
        the segment store refuses are sent again before they fail, default 120)."""
        fields = {f.name for f in dataclasses.fields(WriterOptions)}
        unknown = sorted(set(options) - fields)
        if unknown:
            raise TypeError(f"create_writer got unknown options {unknown}; known: {sorted(fields)}")
        chosen = WriterOptions(**options)
        chosen.validate()
        writer = self._async.create_writer(
            scope,
            stream,
            pending_events_max=chosen.pending_events_max,
            delivery_timeout_s=chosen.delivery_timeout_s,
        )
        return EventWriter(self._loop, writer, chosen)

    def create_reader(self, scope: str, stream: str, **options: Any) -> EventReader:
        return EventReader(self._loop, self._async.create_reader(scope, stream, **options))

    def create_transaction_writer(self, scope: str, stream: str) -> TransactionalWriter:
        return TransactionalWriter(self._loop, self._async.create_transaction_writer(scope, stream))

    def list_streams(self, scope: str) -> list[str]:
        """The names of the scope's streams."""
        return self._loop.run(self._async.list_streams(scope))

    def get_stream_cut(self, scope: str, stream: str, at: str | int = "tail") -> StreamCut:
        """The head (``"head"``), the tail (``"tail"``) or the position at a time (ms)."""
        return self._loop.run(self._async.get_stream_cut(scope, stream, at))

    def next_stream_cut(self, cut: StreamCut, approx_bytes: int) -> tuple[StreamCut, int]:
        """The cut about ``approx_bytes`` after ``cut``, and the bytes between them."""
        return self._loop.run(self._async.next_stream_cut(cut, approx_bytes))

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

    def stream_schema(self, scope: str, stream: str) -> dict[str, Any]:
        """As ``AsyncStreamManager.stream_schema``."""
        return self._loop.run(self._async.stream_schema(scope, stream))

    def registry(self, method: str, path: str, body: Any = None) -> Any:
        """As ``AsyncStreamManager.registry``."""
        return self._loop.run(self._async.registry(method, path, body))

    def admin(self, calls: Callable[[AdminCalls], Coroutine[Any, Any, T]]) -> T:
        """``calls(admin)`` made on the manager's loop: the management calls
        (``AdminCalls``: ``manager.admin(lambda a: a.schema_by_id(7))``)."""
        return self._loop.run(calls(self._async.admin))

    def create_batch_client(self) -> BatchClient:
        """Segment ranges between stream cuts, read independently (Pravega's BatchClient)."""
        return BatchClient(self._loop, AsyncBatchClient(self._async.controller))

    def create_byte_stream(self, scope: str, stream: str) -> ByteStream:
        """As ``AsyncStreamManager.create_byte_stream``."""
        return ByteStream(self._loop, self._loop.run(self._async.create_byte_stream(scope, stream)))

    def close(self) -> None:
        self._loop.shut(self, self._async.close)


async def _make(uri: str, token: str, tls: dict[str, Any]) -> AsyncStreamManager:
    return AsyncStreamManager(uri, token, **tls)  # httpx's client belongs to the loop it is made on
