"""Pravega's Python client API (the ``pravega`` package's ``pravega_client``, 0.3.x) on Millrace.

A program written for the official client runs against Millrace by changing one import::

    import millrace.client.pravega_compat as pravega_client

    manager = pravega_client.StreamManager("http://127.0.0.1:9091", auth_enabled=True)
    manager.create_scope("demo")
    manager.create_stream("demo", "orders", 1)
    writer = manager.create_writer("demo", "orders")
    writer.write_event("hello", routing_key="key-1")
    writer.flush()

The names, parameters and defaults are those of the official client (``StreamManager``,
``StreamWriter``, ``StreamTxnWriter``/``StreamTransaction``, ``StreamReaderGroup``/
``StreamReader`` with segment slices, ``ByteStream``, the scaling and retention policies,
``StreamCuts``, ``TxnFailedException``). Two differences, both about where to connect:
``controller_uri`` is Millrace's HTTP URL (``http://host:9091``), not a ``tcp://`` controller
address; and with ``auth_enabled=True`` the credentials are a Millrace token, taken from the
``token=`` keyword or the ``MILLRACE_TOKEN`` environment variable (the official client reads
Pravega's credentials from the environment likewise). ``tls_enabled`` asks for an ``https://``
(or ``tls://``) URL, trusting ``trust_store`` (a PEM CA file, Pravega's ``trustStore``; default:
the system's); ``disable_cert_verification`` turns off the host-name check (Pravega's
``validateHostName=false``), never the check of the chain. Everything runs on Millrace's own
client (``millrace.client``), so the speed and the guarantees are Millrace's.

As Pravega's Java writers and readers are made with a ``Serializer``, ``create_writer``,
``create_transaction_writer`` and ``create_reader_group`` take ``serializer=``: an object with
``serialize(value) -> bytes`` and ``deserialize(bytes) -> value``. The writers' ``write_event``
then takes any value, and the events a reader reads give it back with ``value()``.
``ConfluentSerializer`` makes one of Confluent's serializer and deserializer (``confluent-kafka``'s
``AvroSerializer`` ...), for a stream bound to its default subject.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

from millrace.client.blocking_readers import GroupReader
from millrace.client.events import EventRead
from millrace.client.manager import StreamManager as _Manager
from millrace.client.reader_group import SegmentSlice
from millrace.client.streamcut import StreamCut
from millrace.client.transactions import TxnFailedError
from millrace.kernel import rest_paths as paths

__all__ = [
    "ByteStream",
    "ConfluentSerializer",
    "Serializer",
    "StreamCuts",
    "StreamManager",
    "StreamReader",
    "StreamReaderGroup",
    "StreamReaderGroupConfig",
    "StreamRetentionPolicy",
    "StreamScalingPolicy",
    "StreamTransaction",
    "StreamTxnWriter",
    "StreamWriter",
    "TxnFailedException",
]

#: Where the token comes from when ``auth_enabled`` and no ``token=`` is given.
TOKEN_VARIABLE = "MILLRACE_TOKEN"


class Serializer(Protocol):
    """Pravega's ``Serializer``: a value to the bytes of an event, and back."""

    def serialize(self, value: Any) -> bytes: ...

    def deserialize(self, data: bytes) -> Any: ...


class ConfluentSerializer:
    """Confluent's serializer and deserializer as a Pravega ``Serializer`` of one stream: values
    in Confluent's wire format, under the stream's default subject (``<scope>.<stream>-value``,
    what a stream's schema enforcement checks)."""

    def __init__(
        self, serializer: Any, deserializer: Any, scope_name: str, stream_name: str
    ) -> None:
        from confluent_kafka.serialization import MessageField, SerializationContext

        self._serializer, self._deserializer = serializer, deserializer
        self._context = SerializationContext(f"{scope_name}.{stream_name}", MessageField.VALUE)

    def serialize(self, value: Any) -> bytes:
        return bytes(self._serializer(value, self._context))

    def deserialize(self, data: bytes) -> Any:
        return self._deserializer(data, self._context)


class _Shown:
    """Shown as the official client shows its objects: by ``to_str()``."""

    def to_str(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.to_str()


class TxnFailedException(Exception):
    """A transaction could not be committed (it was aborted, or timed out)."""


class StreamScalingPolicy:
    """How a stream scales (Pravega's ``ScalingPolicy``)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    @staticmethod
    def fixed_scaling_policy(initial_segments: int) -> StreamScalingPolicy:
        return StreamScalingPolicy({"type": "FIXED_NUM_SEGMENTS", "minSegments": initial_segments})

    @staticmethod
    def auto_scaling_policy_by_data_rate(
        target_rate_kbytes_per_sec: int, scale_factor: int, initial_segments: int
    ) -> StreamScalingPolicy:
        return StreamScalingPolicy(
            {
                "type": "BY_RATE_IN_KBYTES_PER_SEC",
                "targetRate": target_rate_kbytes_per_sec,
                "scaleFactor": scale_factor,
                "minSegments": initial_segments,
            }
        )

    @staticmethod
    def auto_scaling_policy_by_event_rate(
        target_events_per_sec: int, scale_factor: int, initial_segments: int
    ) -> StreamScalingPolicy:
        return StreamScalingPolicy(
            {
                "type": "BY_RATE_IN_EVENTS_PER_SEC",
                "targetRate": target_events_per_sec,
                "scaleFactor": scale_factor,
                "minSegments": initial_segments,
            }
        )


class StreamRetentionPolicy:
    """How long a stream keeps its data (Pravega's ``RetentionPolicy``)."""

    def __init__(self, body: dict[str, Any] | None) -> None:
        self.body = body

    @staticmethod
    def none() -> StreamRetentionPolicy:
        return StreamRetentionPolicy(None)

    @staticmethod
    def by_size(size_in_bytes: int) -> StreamRetentionPolicy:
        megabytes = max(1, -(-size_in_bytes // (1024 * 1024)))
        return StreamRetentionPolicy({"type": "LIMITED_SIZE_MB", "value": megabytes})

    @staticmethod
    def by_time(time_in_millis: int) -> StreamRetentionPolicy:
        minutes = max(1, -(-time_in_millis // 60_000))
        days, rest = divmod(minutes, 24 * 60)
        hours, minutes = divmod(rest, 60)
        return StreamRetentionPolicy(
            {
                "type": "LIMITED_DAYS",
                "value": days,
                "timeBasedRetention": {"days": days, "hours": hours, "minutes": minutes},
            }
        )


class StreamCuts:
    """A position in a stream: segment number → offset (Pravega's ``StreamCut``)."""

    def __init__(self, cut: StreamCut) -> None:
        self.cut = cut

    def get_segment_offset_map(self) -> dict[int, int]:
        return dict(self.cut.positions)

    def to_str(self) -> str:
        return self.cut.to_text()

    def __repr__(self) -> str:
        return f"StreamCuts({self.cut.to_text()})"


class StreamReaderGroupConfig(_Shown):
    """The streams a reader group reads, all from the head or all from the tail."""

    def __init__(self, read_from_tail: bool, scope_name: str, *stream_names: str) -> None:
        if not stream_names:
            raise ValueError("a reader group reads at least one stream")
        self.read_from_tail = read_from_tail
        self.streams = {f"{scope_name}/{name}": "tail" if read_from_tail else "head"
                        for name in stream_names}  # fmt: skip

    def to_str(self) -> str:
        return f"StreamReaderGroupConfig({', '.join(self.streams)})"


class StreamManager(_Shown):
    """Scopes, streams, writers, readers and byte streams (see the module's docstring)."""

    def __init__(
        self,
        controller_uri: str,
        auth_enabled: bool = False,
        tls_enabled: bool = False,
        disable_cert_verification: bool = False,
        *,
        token: str | None = None,
        trust_store: str | None = None,
    ) -> None:
        if not controller_uri.startswith(("http://", "https://", "tls://")):
            raise ValueError(
                f"controller_uri {controller_uri!r}: give Millrace's HTTP URL "
                "(for example http://127.0.0.1:9091), not a tcp:// controller address"
            )
        if tls_enabled and controller_uri.startswith("http://"):
            raise ValueError("tls_enabled=True needs an https:// (or tls://) URL")
        if auth_enabled and token is None:
            token = os.environ.get(TOKEN_VARIABLE)
            if not token:
                raise ValueError(
                    f"auth_enabled=True: pass token=... or set {TOKEN_VARIABLE} to a Millrace token"
                )
        self.controller_uri = controller_uri
        self._manager = _Manager(
            controller_uri, token=token or "", tls_ca=trust_store,
            validate_hostname=not disable_cert_verification,
        )  # fmt: skip
        self._io = self._manager._loop
        self._controller = self._manager._async.controller

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        return self._io.run(self._controller.call(method, path, body))

    # -- scopes and streams ------------------------------------------------------------------

    def create_scope(self, scope_name: str) -> bool:
        return self._manager.create_scope(scope_name)

    def delete_scope(self, scope_name: str) -> bool:
        self._manager.delete_scope(scope_name)
        return True

    def list_scope(self) -> list[str]:
        return [s["scopeName"] for s in self._call("GET", paths.scopes())["scopes"]]

    def list_stream(self, scope_name: str) -> list[str]:
        found = self._call("GET", paths.streams(scope_name))["streams"]
        return [s["streamName"] for s in found]

    def create_stream(self, scope_name: str, stream_name: str, initial_segments: int) -> bool:
        return self._manager.create_stream(scope_name, stream_name, initial_segments)

    def create_stream_with_policy(
        self,
        scope_name: str,
        stream_name: str,
        scaling_policy: StreamScalingPolicy | None = None,
        retention_policy: StreamRetentionPolicy | None = None,
        tags: list[str] | None = None,
    ) -> bool:
        body = {"streamName": stream_name, **_policies(scaling_policy, retention_policy, tags)}
        try:
            self._call("POST", paths.streams(scope_name), body)
        except Exception as exc:
            if getattr(exc, "code", None) == "already-exists":
                return False
            raise
        return True

    def update_stream_with_policy(
        self,
        scope_name: str,
        stream_name: str,
        scaling_policy: StreamScalingPolicy | None = None,
        retention_policy: StreamRetentionPolicy | None = None,
        tags: list[str] | None = None,
    ) -> bool:
        body = _policies(scaling_policy, retention_policy, tags)
        self._call("PUT", paths.stream(scope_name, stream_name), body)
        return True

    def get_stream_tags(self, scope_name: str, stream_name: str) -> list[str] | None:
        found = self._call("GET", paths.stream(scope_name, stream_name))
        return list(found.get("tags") or []) or None

    def seal_stream(self, scope_name: str, stream_name: str) -> bool:
        self._manager.seal_stream(scope_name, stream_name)
        return True

    def delete_stream(self, scope_name: str, stream_name: str) -> bool:
        self._manager.delete_stream(scope_name, stream_name)
        return True

    # -- clients -----------------------------------------------------------------------------

    def create_writer(
        self,
        scope_name: str,
        stream_name: str,
        max_inflight_events: int = 0,
        serializer: Serializer | None = None,
    ) -> StreamWriter:
        options = {"pending_events_max": max_inflight_events} if max_inflight_events > 0 else {}
        writer = self._manager.create_writer(scope_name, stream_name, **options)
        return StreamWriter(self, writer, serializer)

    def create_transaction_writer(
        self,
        scope_name: str,
        stream_name: str,
        writer_id: int,
        serializer: Serializer | None = None,
    ) -> StreamTxnWriter:
        writer = self._manager.create_transaction_writer(scope_name, stream_name)
        return StreamTxnWriter(self, scope_name, stream_name, writer, writer_id, serializer)

    def create_reader_group(
        self,
        reader_group_name: str,
        scope_name: str,
        stream_name: str,
        read_from_tail: bool = False,
        stream_cut: StreamCuts | None = None,
        serializer: Serializer | None = None,
    ) -> StreamReaderGroup:
        start: str | StreamCut = "tail" if read_from_tail else "head"
        if stream_cut is not None:
            start = stream_cut.cut
        group = self._manager.create_reader_group(
            scope_name, reader_group_name, {f"{scope_name}/{stream_name}": start}
        )
        return StreamReaderGroup(self, group, scope_name, stream_name, serializer)

    def create_reader_group_with_config(
        self, reader_group_name: str, scope_name: str, rg_config: StreamReaderGroupConfig
    ) -> StreamReaderGroup:
        streams: dict[str, str | StreamCut] = dict(rg_config.streams)
        group = self._manager.create_reader_group(scope_name, reader_group_name, streams)
        first = next(iter(rg_config.streams)).split("/", 1)[1]
        return StreamReaderGroup(self, group, scope_name, first)

    def delete_reader_group(self, reader_group_name: str, scope_name: str) -> None:
        self._manager.reader_group(scope_name, reader_group_name).delete()

    def create_byte_stream(self, scope_name: str, stream_name: str) -> ByteStream:
        return ByteStream(self._manager.create_byte_stream(scope_name, stream_name))

    def close(self) -> None:
        """(Not in the official client, which closes when collected.)"""
        self._manager.close()

    def to_str(self) -> str:
        return f"Controller ip: {self.controller_uri}"

    def __repr__(self) -> str:
        return f"StreamManager({self.to_str()})"


def _policies(
    scaling: StreamScalingPolicy | None,
    retention: StreamRetentionPolicy | None,
    tags: list[str] | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "scalingPolicy": (scaling or StreamScalingPolicy.fixed_scaling_policy(1)).body,
        "retentionPolicy": (retention or StreamRetentionPolicy.none()).body,
    }
    if tags is not None:
        body["streamTags"] = list(tags)
    return body


class StreamWriter(_Shown):
    """Writes events to one stream; ``flush`` makes them durable."""

    def __init__(
        self, manager: StreamManager, writer: Any, serializer: Serializer | None = None
    ) -> None:
        self._manager, self._writer = manager, writer
        self._serialize = serializer.serialize if serializer is not None else _as_is

    def write_event(self, event: Any, routing_key: str | None = None) -> None:
        """``event``: text, or with a serializer any value it takes."""
        self._writer.write_event(self._serialize(event), routing_key)

    def write_event_bytes(self, event: bytes, routing_key: str | None = None) -> None:
        self._writer.write_event(event, routing_key)

    def write_event_async(self, event: Any, routing_key: str | None = None) -> asyncio.Future[None]:
        """An awaitable of the caller's event loop, done once the event is durable."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def landed(error: BaseException | None) -> None:
            loop.call_soon_threadsafe(_settle, done, error)

        self._writer.write_event(self._serialize(event), routing_key, callback=landed)
        return done

    def flush(self) -> None:
        self._writer.flush()

    def to_str(self) -> str:
        return f"StreamWriter({self._writer._writer.scope}/{self._writer._writer.stream})"


def _as_is(event: Any) -> Any:
    return event


def _settle(done: asyncio.Future[None], error: BaseException | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)


class StreamTxnWriter(_Shown):
    """Begins transactions on one stream."""

    def __init__(
        self,
        manager: StreamManager,
        scope: str,
        stream: str,
        writer: Any,
        writer_id: int,
        serializer: Serializer | None = None,
    ) -> None:
        self._manager, self._writer = manager, writer
        self.scope, self.stream, self.writer_id = scope, stream, writer_id
        self._serializer = serializer

    def begin_txn(self) -> StreamTransaction:
        return StreamTransaction(self._writer.begin_txn(), self._serializer)

    def get_txn(self, txn_id: int) -> StreamTransaction:
        """An open transaction by its id (``get_txn_id``), to write or end it."""
        txn = self._writer.get_txn(uuid.UUID(int=txn_id))
        return StreamTransaction(txn, self._serializer)

    def to_str(self) -> str:
        return f"StreamTxnWriter({self.scope}/{self.stream}, writer {self.writer_id})"


class StreamTransaction(_Shown):
    """One transaction: its events appear together on ``commit`` (never, on ``abort``)."""

    def __init__(self, txn: Any, serializer: Serializer | None = None) -> None:
        self._txn = txn
        self._serializer = serializer

    def get_txn_id(self) -> int:
        return int(self._txn.txn_id.int)

    def is_open(self) -> bool:
        return str(self._txn.check_status()) == "OPEN"

    def write_event(self, event: Any, routing_key: str | None = None) -> None:
        """``event``: text, or with a serializer any value it takes."""
        if self._serializer is not None:
            self.write_event_bytes(self._serializer.serialize(event), routing_key)
        else:
            self.write_event_bytes(event.encode("utf-8"), routing_key)

    def write_event_bytes(self, event: bytes, routing_key: str | None = None) -> None:
        try:
            self._txn.write_event(event, routing_key)
        except TxnFailedError as exc:
            raise TxnFailedException(str(exc)) from exc

    def commit(self) -> None:
        try:
            self._txn.commit()
        except RuntimeError as exc:
            raise TxnFailedException(str(exc)) from exc

    def commit_timestamp(self, timestamp_as_u64: int) -> None:
        try:
            self._txn.commit(timestamp_as_u64)
        except RuntimeError as exc:
            raise TxnFailedException(str(exc)) from exc

    def abort(self) -> None:
        self._txn.abort()

    def to_str(self) -> str:
        return f"StreamTransaction({self._txn.txn_id})"


class StreamReaderGroup(_Shown):
    """A reader group: readers sharing its streams."""

    def __init__(
        self,
        manager: StreamManager,
        group: Any,
        scope: str,
        stream: str,
        serializer: Serializer | None = None,
    ) -> None:
        self._manager, self._group = manager, group
        self.scope, self.stream = scope, stream
        self._readers: dict[str, StreamReader] = {}
        self._serializer = serializer

    def create_reader(self, reader_name: str) -> StreamReader:
        made = self._group.create_reader(reader_name)
        reader = StreamReader(self._manager, made, self._serializer)
        self._readers[reader_name] = reader
        return reader

    def reader_offline(self, reader_name: str) -> None:
        """The reader leaves the group (its segments go back at what it handed out)."""
        reader = self._readers.pop(reader_name, None)
        if reader is not None:
            reader.reader_offline()

    def get_streamcut(self) -> StreamCuts:
        """Where the group's readers are in its (first) stream."""
        described = self._group.describe()
        held: dict[str, int] = dict(described["unassignedSegments"])
        for reader in described["readers"]:
            held.update(reader["segments"])
        prefix = f"{self.scope}/{self.stream}/"
        positions = {
            int(key[len(prefix) :]): int(offset)
            for key, offset in held.items()
            if key.startswith(prefix)
        }
        return StreamCuts(StreamCut(self.scope, self.stream, positions))

    def to_str(self) -> str:
        return f"StreamReaderGroup({self._group.scope}/{self._group.name})"


class EventData:
    """One event of a slice: ``data()`` and ``offset()`` (in its segment); with the reader
    group's serializer, ``value()``."""

    __slots__ = ("_event", "_serializer")

    def __init__(self, event: EventRead, serializer: Serializer | None = None) -> None:
        self._event = event
        self._serializer = serializer

    def data(self) -> bytes:
        return self._event.data

    def value(self) -> Any:
        """The event as its serializer reads it (the reader group was given one)."""
        if self._serializer is None:
            raise ValueError("value() needs the reader group created with serializer=")
        return self._serializer.deserialize(self._event.data)

    def offset(self) -> int:
        return self._event.offset

    def __repr__(self) -> str:
        return f"EventData(offset={self._event.offset}, {len(self._event.data)} bytes)"


class Slice:
    """Events of one segment; iterate it, then hand it to ``release_segment``."""

    def __init__(self, piece: SegmentSlice, serializer: Serializer | None = None) -> None:
        self.piece = piece
        self._serializer = serializer

    def __iter__(self) -> Iterator[EventData]:
        for event in self.piece:
            yield EventData(event, self._serializer)

    def __repr__(self) -> str:
        return f"Slice({self.piece.segment}, {len(self.piece)} events)"


class StreamReader(_Shown):
    """A reader of a reader group, reading segment slices."""

    def __init__(
        self, manager: StreamManager, reader: GroupReader, serializer: Serializer | None = None
    ) -> None:
        self._manager, self._reader = manager, reader
        self._serializer = serializer

    async def get_segment_slice_async(self) -> Slice:
        """The next slice of events (waits until there is one)."""
        io = self._manager._io
        while True:
            taken = asyncio.run_coroutine_threadsafe(
                self._reader._reader.read_slice(timeout=1.0), io.loop
            )
            piece = await asyncio.wrap_future(taken)
            if piece is not None:
                return Slice(piece, self._serializer)
            if self._reader.finished:
                raise RuntimeError("every stream of the reader group is sealed and read")

    def release_segment(self, slice: Slice) -> None:
        self._reader.release_segment(slice.piece)

    def reader_offline(self) -> None:
        self._reader.close()

    def to_str(self) -> str:
        return f"StreamReader({self._reader.reader_id})"


class ByteStream(_Shown):
    """A one-segment stream as a file of bytes."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, byte_array: bytes) -> int:
        return int(self._stream.write(bytes(byte_array)))

    def flush(self) -> None:
        self._stream.flush()

    def readinto(self, byteArray: bytearray) -> int:
        data = self._stream.read(len(byteArray))
        byteArray[: len(data)] = data
        return len(data)

    def seek(self, position: int, whence: int = 0) -> int:
        return int(self._stream.seek(position, whence))

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return int(self._stream.tell())

    def current_head_offset(self) -> int:
        return int(self._stream.current_head_offset())

    def current_tail_offset(self) -> int:
        return int(self._stream.current_tail_offset())

    def truncate(self, offset: int) -> None:
        self._stream.truncate(offset)

    def to_str(self) -> str:
        return "ByteStream"
