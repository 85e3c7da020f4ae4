"""The Kafka listener of a segment store node (``MILLRACE_KAFKA_PORT``, 9092).

Responsibility: accept Kafka clients, read their frames, answer each request in turn (as a
Kafka broker does: one request of a connection at a time, replies in order), and keep serving
whatever a client sends. A frame that does not decode is answered with Kafka's error code when
its header can be read; only a frame whose size cannot be a request (negative, or over
``FRAME_BYTES_MAX`` without a readable header) ends its connection. What each request does is
``segment_app.kafka.handlers``'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from millrace.kernel.kafka_topics import KafkaCatalog, stream_topic
from millrace.kernel.naming import parse_segment_name, segment_number
from segment_app.engine.api import SegmentStoreAPI
from segment_app.kafka import codec
from segment_app.kafka.context import SASL_AUTHENTICATION_FAILED, KafkaSettings, Session
from segment_app.kafka.groups import GroupCoordinator
from segment_app.kafka.handlers import Handlers
from segment_app.kafka.partitions import Partitions
from segment_app.server.quotas import ScopeThrottles
from segment_app.server.schema_guard import SchemaGuard

__all__ = ["KafkaServer"]

log = logging.getLogger(__name__)

#: How often the listener looks at its groups and partitions' ends (the console's Kafka page),
#: and reports them when they changed.
REPORT_EVERY_S = 2.0
#: An unchanged report is written again this often (its readers take reports up to 30 s old).
REPORT_KEEP_S = 10.0
#: Kafka's ``socket.request.max.bytes``: a larger frame is refused and skipped.
FRAME_BYTES_MAX = 100 * 1024 * 1024
_SIZE = struct.Struct(">i")


class KafkaServer:
    """Serves Kafka's protocol over a node's store; ``start`` / ``stop``."""

    def __init__(
        self, store: SegmentStoreAPI, settings: KafkaSettings, catalog: KafkaCatalog,
        *, tls: ssl.SSLContext | None = None, schema_guard: SchemaGuard | None = None,
        quotas: ScopeThrottles | None = None,
    ) -> None:  # fmt: skip
        self.settings = settings
        self.tls = tls
        self.partitions = Partitions(store)
        self.groups = GroupCoordinator()
        self.handlers = Handlers(settings, self.partitions, self.groups, catalog)
        #: Set before ``start``: the node's schema guard and scope quotas (None: none).
        self.handlers.context.schema_guard = schema_guard
        self.handlers.context.quotas = quotas
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._reporter: asyncio.Task[None] | None = None
        self._reported = asyncio.Event()
        self._reports_executor = ThreadPoolExecutor(1, thread_name_prefix="kafka-reports")
        self._catalog = catalog

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the Kafka listener is not listening")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self.groups.start()
        self._server = await asyncio.start_server(
            self._serve, self.settings.host, self.settings.port, reuse_address=True, ssl=self.tls
        )
        log.info("Kafka listener on %s:%d", self.settings.host, self.port)
        self._reporter = asyncio.create_task(self._report_loop())
        if self.settings.clustered:  # (its first answers name the cluster's brokers already)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reported.wait(), REPORT_EVERY_S * 5)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        if self._reporter is not None:
            self._reporter.cancel()
        self._reports_executor.shutdown(wait=False, cancel_futures=True)
        for task in list(self._connections):
            task.cancel()
        await self.groups.stop()
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None

    async def _report_loop(self) -> None:
        """Every ``REPORT_EVERY_S``, what the listener says of itself, to the catalog; a
        cluster's node reads back the cluster as Kafka's clients are to see it."""
        name = self.settings.node_name or f"{self.settings.advertised_host}:{self.port}"
        last: dict[str, object] | None = None
        written = 0.0
        while True:
            try:
                report = _report(self.settings, self.port, self.groups, self.partitions)
                now = time.monotonic()
                # (written when it changed, else every REPORT_KEEP_S: a node nobody uses writes
                # its metadata database seldom, which may sit on a full disk)
                if report != last or now - written >= REPORT_KEEP_S:
                    await self._off_loop(self._catalog.report, name, report)
                    last, written = report, now
                if self.settings.clustered:  # (who leads what, as the next replies say)
                    self.handlers.context.view = await self._off_loop(self._catalog.cluster)
            except Exception as exc:  # (the metadata database away: the next report)
                log.warning("Kafka listener report not kept: %s", exc)
            self._reported.set()
            await asyncio.sleep(REPORT_EVERY_S)

    async def _off_loop(self, call: Any, *args: Any) -> Any:
        """``call(*args)`` on the listener's own thread: a metadata database that hangs holds
        its reports, never the threads the node's appends and reads share."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reports_executor, call, *args)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        session = Session(host=str(peer[0]))
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                if size < 0:
                    log.info("Kafka client %s sent a frame of size %d: closed", peer, size)
                    return
                if size > FRAME_BYTES_MAX:
                    await self._refuse_oversized(reader, writer, size)
                    continue
                frame = await reader.readexactly(size)
                if session.raw_sasl:  # (SaslHandshake v0: the token comes bare)
                    session.raw_sasl = False
                    principal = await self.handlers.authenticate_plain(frame)
                    if principal is None:
                        log.info("Kafka client %s: SASL/PLAIN refused", peer)
                        return  # (v0 has no way to say why: Kafka closes too)
                    session.principal = principal
                    writer.write(_SIZE.pack(0))
                    continue
                reply = await self._answer(frame, session)
                if reply is not None:
                    writer.write(reply)
                    await writer.drain()
                if session.throttle_s > 0:  # (Kafka mutes a throttled client's connection)
                    await asyncio.sleep(session.throttle_s)
                    session.throttle_s = 0.0
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _refuse_oversized(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, size: int
    ) -> None:
        """Answer a frame over the limit from its header, and skip it."""
        key, version, correlation = struct.unpack(">hhi", await reader.readexactly(8))
        left = size - 8
        while left > 0:
            chunk = await reader.read(min(left, 1 << 20))
            if not chunk:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(chunk)
        log.info("Kafka request (API key %d v%d) of %d bytes refused: over %d",
                 key, version, size, FRAME_BYTES_MAX)  # fmt: skip
        too_large = codec.DecodeError(
            "", codec.ErrorCode.message_too_large, key, version, correlation
        )
        reply = _refusal(too_large)
        if reply is not None:
            writer.write(reply)
            await writer.drain()

    async def _answer(self, frame: bytes, session: Session) -> bytes | None:
        try:
            request = codec.decode_request(frame)
        except codec.DecodeError as exc:
            log.info("Kafka request refused: %s", exc)
            return _refusal(exc)
        key, version = request.key, request.version
        session.client_id = request.client_id or session.client_id
        if key == codec.API_VERSIONS and request.body is None:
            version = 0  # (an unknown version is answered in v0)
        try:
            values = await self.handlers.table[key](request.body, request.version, session)
        except Exception:
            log.exception("Kafka API key %d v%d failed", key, version)
            reply = codec.error_reply(key, version, codec.ErrorCode.unknown_server_error)
            return codec.encode_reply(key, version, request.correlation_id, reply)
        if values is None:  # (a produce with acks=0 has no reply)
            return None
        if key == 36 and values.get("error_code") == SASL_AUTHENTICATION_FAILED:
            log.info("Kafka client %s: SASL authentication failed", session.host)
        reply = codec.build(codec.response_schema(key, version), values)
        return codec.encode_reply(key, version, request.correlation_id, reply)


def _refusal(error: codec.DecodeError) -> bytes | None:
    """The reply to a request that did not decode, when its API and version are known."""
    if error.correlation_id is None:
        return None
    key, version = error.key, error.version
    span = codec.SUPPORTED.get(key)
    if span is None or not span[0] <= version <= span[1]:
        # Not a reply kio can write for: the bare header and the error code, which is what a
        # client that asked a version it was not offered reads first.
        return _SIZE.pack(6) + struct.pack(">ih", error.correlation_id, int(error.code))
    reply = codec.error_reply(key, version, error.code)
    return codec.encode_reply(key, version, error.correlation_id, reply)


def _report(settings: KafkaSettings, port: int, groups: GroupCoordinator,
            partitions: Partitions) -> dict[str, object]:  # fmt: skip
    """What the listener says of itself to the controller's views: its bootstrap address, its
    groups, and its partitions' end offsets and the bytes stored before them
    (``topic/partition``)."""
    described = []
    for name in sorted(groups.groups):
        found = groups.describe(name)
        if found is None:
            continue
        members = [{"member": m["member_id"], "client": m["client_id"], "host": m["client_host"]}
                   for m in found["members"]]  # fmt: skip
        described.append({"group": name, "state": found["state"], "protocol": found["protocol"],
                          "generation": found["generation"], "members": members})  # fmt: skip
    ends, sizes = {}, {}
    for segment, log_ in partitions.opened().items():
        with contextlib.suppress(ValueError):
            scope, stream, segment_id = parse_segment_name(segment)
            key = f"{stream_topic(scope, stream, settings.scope)}/{segment_number(segment_id)}"
            ends[key], sizes[key] = log_.frontier_records, log_.frontier_bytes
    return {"bootstrap": f"{settings.advertised_host}:{port}", "groups": described, "ends": ends,
            "sizes": sizes}  # fmt: skip
