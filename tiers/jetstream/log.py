"""``JetStreamDurableDataLog``: tier-1 on NATS JetStream, one JetStream stream per container log.

Responsibility: implement the tier-1 primitives with ``nats-py`` on a replicated log service.

* **Layout.** The log ``log_id`` is the JetStream stream ``<stream_prefix>_<log id>`` with two
  subjects: ``millrace.<stream_prefix>.<log id>.frames`` (the frames) and
  ``millrace.<stream_prefix>.<log id>.epoch`` (one
  message per ``open``, its header ``Millrace-Epoch`` holding the epoch). A frame larger than
  what one message may carry (the server's ``max_payload``, 1 MiB by default) goes as several
  consecutive messages with a ``Millrace-Part: i/n`` header; a frame's address is
  ``LogAddress(sequence=<stream sequence of its last message>, offset=<of its first>)``.
* **Acknowledgement.** ``append`` returns once JetStream acknowledged every message of the
  frame: stored by the stream's leader and, with ``replicas`` > 1, by a majority of its
  replicas. When that is on disk is the server's business: JetStream writes the file store at
  once and fsyncs it every ``sync_interval`` (2 min by default; ``sync_interval: always`` in
  the server's configuration syncs each message). So with one server an acknowledged frame
  survives the server's crash but not the machine's power loss unless the server syncs
  always; with three replicas it survives the loss of one server.
* **Leader changes.** A publish that gets no answer (no leader yet, a server gone) is sent
  again with the same ``Nats-Msg-Id`` for up to ``request_timeout_s``; if the first one was
  stored, JetStream answers the retry with its sequence instead of storing it twice.
* **Fencing.** Every frame message is published with ``Nats-Expected-Last-Sequence`` set to
  the last sequence this instance wrote (or its epoch message's). ``open(epoch)`` refuses an
  epoch not above the newest epoch message, then publishes its own, which moves the stream's
  last sequence: from then on every publish of an older instance fails on the server (wrong
  last sequence) and raises ``DataLogFencedError``, so a stale container can never append.
  ``truncate`` checks the newest epoch message first.
* **Recovery.** ``read_all`` reads the frames subject from the first message still kept up to
  the stream's last message as of the call, reassembling split frames; a frame whose parts are
  not all there (its writer died, or was fenced, half-way) is dropped.
* **Truncation** purges the frames subject below the address's next sequence.

The client runs on its own event loop in one daemon thread; the primitives (``blocking``) wait
for it from the base class's worker threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.js import api

from millrace.kernel import defaults
from tiers.base import (
    DataLogError,
    DataLogFencedError,
    DurableDataLog,
    Frame,
    LogAddress,
    frame_bytes,
)

__all__ = ["JetStreamDurableDataLog"]

_T = TypeVar("_T")
EPOCH_HEADER = "Millrace-Epoch"
PART_HEADER = "Millrace-Part"
EXPECTED_LAST = "Nats-Expected-Last-Sequence"
MSG_ID = "Nats-Msg-Id"
#: Seconds one publish waits for its answer before it is sent again (same message id).
PUBLISH_TRY_S = 2.0
#: Seconds one JetStream API request waits before it is tried again.
TRY_S = 5.0
#: JetStream's error code for a publish whose expected last sequence is not the stream's.
WRONG_LAST_SEQUENCE = 10071
#: Answers meaning "not now" (no leader yet, no responders while a stream is placed).
UNSETTLED = (
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
    nats.errors.NoRespondersError,
    nats.errors.TimeoutError,
)
#: Room kept in each message for its headers.
HEADER_ROOM = 1024


class _Loop:
    """An event loop in a daemon thread; ``run`` waits for a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="jetstream")
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _token(log_id: str) -> str:
    """``log_id`` as one subject token and stream-name part: readable, and unique by a hash."""
    clean = re.sub(r"[^A-Za-z0-9_-]", "_", log_id)[-40:]
    return f"{clean}_{hashlib.sha256(log_id.encode()).hexdigest()[:10]}"


class JetStreamDurableDataLog(DurableDataLog):
    """Tier-1 on NATS JetStream (see the module doc).

    Options: ``servers`` (NATS URLs, default ``["nats://127.0.0.1:4222"]``), ``log_id`` (set
    per container by the node), ``stream_prefix`` (``MILLRACE``), ``replicas`` (1),
    ``storage`` (``file`` or ``memory``), ``user`` / ``password`` or ``token``,
    ``connect_timeout_s`` (5), ``request_timeout_s`` (30), ``read_batch_frames_max`` (1024).
    """

    name = "jetstream"
    is_durable = True
    supports_fencing = True
    blocking = True

    @classmethod
    def default_options(cls, data_dir: str, log_id: str) -> dict[str, Any]:
        return {"log_id": log_id}

    def __init__(
        self,
        *,
        servers: Sequence[str] | str = ("nats://127.0.0.1:4222",),
        log_id: str = "log",
        stream_prefix: str = "MILLRACE",
        replicas: int = 1,
        storage: str = "file",
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        connect_timeout_s: float = 5.0,
        request_timeout_s: float = 30.0,
        read_batch_frames_max: int = 1024,
        frame_bytes_max: int = defaults.FRAME_BYTES_MAX,
        batch_frames_max: int = 256,
    ) -> None:
        super().__init__(frame_bytes_max=frame_bytes_max, batch_frames_max=batch_frames_max)
        servers = [servers] if isinstance(servers, str) else list(servers)
        if not servers or not all(isinstance(s, str) and s for s in servers):
            raise ValueError(f"option 'servers' must be a list of NATS URLs, not {servers!r}")
        if not isinstance(replicas, int) or not 1 <= replicas <= 5:
            raise ValueError(f"option 'replicas' must be 1 to 5, not {replicas!r}")
        if storage not in ("file", "memory"):
            raise ValueError(f"option 'storage' must be file or memory, not {storage!r}")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", stream_prefix or ""):
            raise ValueError(
                f"option 'stream_prefix' must be letters, digits, _ or -: {stream_prefix!r}"
            )
        self.servers = servers
        self.log_id = log_id
        token_part = _token(log_id)
        self.stream = f"{stream_prefix}_{token_part}"
        # (the prefix in the subjects too: deployments sharing an account never overlap)
        self.frames_subject = f"millrace.{stream_prefix}.{token_part}.frames"
        self.epoch_subject = f"millrace.{stream_prefix}.{token_part}.epoch"
        self.replicas, self.storage = replicas, storage
        self._auth = {"user": user, "password": password, "token": token}
        self.connect_timeout_s, self.request_timeout_s = connect_timeout_s, request_timeout_s
        self.read_batch_frames_max = read_batch_frames_max
        self._runner: _Loop | None = None
        self._nc: Any = None
        self._js: Any = None
        #: The last stream sequence this instance wrote or saw at ``open``.
        self._last = 0
        self._part_bytes = 0

    def __repr__(self) -> str:
        return f"JetStreamDurableDataLog({self.stream} at {','.join(self.servers)})"

    async def close(self) -> None:
        await super().close()
        if self._runner is not None:  # (connected, but never opened, or its open failed)
            await asyncio.to_thread(self._do_close)

    # -- primitives ----------------------------------------------------------------------------

    def _do_open(self, epoch: int) -> None:
        self._run(self._open(epoch))

    def _do_current_epoch(self) -> int:
        async def current() -> int:
            await self._ensure_stream()
            return await self._newest_epoch()

        return self._run(current())

    def _do_check_fenced(self) -> None:
        self._run(self._check_fenced())

    def _do_append_batch(self, frames: Sequence[Frame]) -> list[LogAddress]:
        return self._run(self._append(frames))

    def _do_read_batch(self, cursor: object) -> tuple[list[tuple[LogAddress, bytes]], object]:
        return self._run(self._read(cursor))

    def _do_truncate(self, upto: LogAddress) -> None:
        async def truncate() -> None:
            await self._check_fenced()
            await self._js.purge_stream(
                self.stream, seq=upto.sequence + 1, subject=self.frames_subject
            )

        self._run(truncate())

    def _do_close(self) -> None:
        if self._runner is None:
            return
        if self._nc is not None:
            self._run(self._nc.close())
        self._runner.stop()
        self._runner = self._nc = self._js = None

    # -- on the client's loop ------------------------------------------------------------------

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        if self._runner is None:
            self._runner = _Loop()
        try:
            return self._runner.run(self._connected(coroutine))
        except (DataLogError, ValueError):
            raise
        except (nats.errors.Error, nats.js.errors.Error, OSError, TimeoutError) as error:
            raise DataLogError(f"{self!r}: {type(error).__name__}: {error}") from error

    async def _connected(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        if self._nc is None:
            auth = {k: v for k, v in self._auth.items() if v}
            try:
                # Reconnects for ever once connected (appends fail meanwhile, the container
                # stops and recovers); the first connection is given connect_timeout_s.
                self._nc = await asyncio.wait_for(
                    nats.connect(
                        servers=self.servers, connect_timeout=self.connect_timeout_s,
                        max_reconnect_attempts=-1, reconnect_time_wait=0.5, **auth,
                    ),
                    self.connect_timeout_s,
                )  # fmt: skip
            except BaseException:
                coroutine.close()
                raise
            # (each try short: ``_settled`` tries again until ``request_timeout_s``)
            self._js = self._nc.jetstream(timeout=min(TRY_S, self.request_timeout_s))
            self._part_bytes = max(self._nc.max_payload - HEADER_ROOM, 4096)
        return await coroutine

    async def _settled(self, step: Callable[[], Awaitable[_T]]) -> _T:
        """``step()``, again while JetStream answers that it cannot serve yet (a cluster
        electing a leader, a stream being placed), for up to ``request_timeout_s``: only for
        steps that change nothing or may be repeated."""
        deadline = asyncio.get_running_loop().time() + self.request_timeout_s
        pause = 0.05
        while True:
            try:
                return await step()
            except UNSETTLED:
                if asyncio.get_running_loop().time() + pause > deadline:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def _ensure_stream(self) -> None:
        await self._settled(self._ensure_stream_once)

    async def _ensure_stream_once(self) -> None:
        config = api.StreamConfig(
            name=self.stream,
            subjects=[self.frames_subject, self.epoch_subject],
            retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE if self.storage == "file" else api.StorageType.MEMORY,
            num_replicas=self.replicas,
            discard=api.DiscardPolicy.NEW,
        )
        try:
            await self._js.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            await self._js.add_stream(config)

    async def _newest_epoch(self) -> int:
        return await self._settled(self._newest_epoch_once)

    async def _newest_epoch_once(self) -> int:
        try:
            message = await self._js.get_last_msg(self.stream, self.epoch_subject)
        except nats.js.errors.NotFoundError:
            return 0
        return int((message.headers or {}).get(EPOCH_HEADER, 0))

    async def _open(self, epoch: int) -> None:
        await self._ensure_stream()
        newest = await self._newest_epoch()
        if epoch <= newest:
            raise DataLogFencedError(f"{self!r}: epoch {epoch} is not above {newest}")
        # Unconditional: it lands even while the old owner writes, and moves the stream's last
        # sequence past what that owner expects, so its next publish fails.
        headers = {EPOCH_HEADER: str(epoch)}
        ack = await self._settled(lambda: self._js.publish(self.epoch_subject, headers=headers))
        newest_message = await self._settled(
            lambda: self._js.get_last_msg(self.stream, self.epoch_subject)
        )
        if newest_message.seq != ack.seq:  # another open came after this one: it owns the log
            raise DataLogFencedError(f"{self!r}: another instance opened it after this one")
        self._last = ack.seq

    async def _check_fenced(self) -> None:
        newest = await self._newest_epoch()
        if self.epoch is not None and newest > self.epoch:
            raise DataLogFencedError(f"{self!r}: fenced by epoch {newest}")

    async def _append(self, frames: Sequence[Frame]) -> list[LogAddress]:
        addresses = []
        step = self._part_bytes
        for frame in frames:
            view = memoryview(frame_bytes(frame))
            parts = [view[i : i + step] for i in range(0, len(view), step)]
            first = 0
            for number, part in enumerate(parts, start=1):
                # The message id names the place: a publish retried after a lost answer is
                # answered with the first one's sequence (JetStream drops the duplicate).
                headers = {EXPECTED_LAST: str(self._last),
                           MSG_ID: f"{self.stream}:{self.epoch}:{self._last}"}  # fmt: skip
                if len(parts) > 1:
                    headers[PART_HEADER] = f"{number}/{len(parts)}"
                payload = bytes(part)
                try:
                    ack = await self._settled(
                        lambda p=payload, h=headers: self._js.publish(  # type: ignore[misc]
                            self.frames_subject, p, timeout=PUBLISH_TRY_S, headers=h
                        )
                    )
                except nats.js.errors.APIError as error:
                    if error.err_code == WRONG_LAST_SEQUENCE:
                        raise DataLogFencedError(f"{self!r}: a newer owner took it over") from None
                    raise
                self._last = ack.seq
                first = first or ack.seq
            addresses.append(LogAddress(self._last, 0, first))
        return addresses

    async def _read(self, cursor: object) -> tuple[list[tuple[LogAddress, bytes]], object]:
        if cursor is None:
            cursor = await self._start_reading()
        assert isinstance(cursor, _Reading)
        frames: list[tuple[LogAddress, bytes]] = []
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while len(frames) < self.read_batch_frames_max and not cursor.done:
            try:
                messages = await cursor.subscription.fetch(256, timeout=2.0)
            except nats.errors.TimeoutError:
                # Not the end (that is a message with nothing pending after it): no answer
                # yet, as while a leader is elected. Wait, but not for ever.
                if loop.time() - quiet_since > self.request_timeout_s:
                    raise DataLogError(f"{self!r}: reading the log got no answer") from None
                continue
            quiet_since = loop.time()
            for message in messages:
                sequence = message.metadata.sequence.stream
                if sequence > cursor.end:  # appended after the read began
                    cursor.done = True
                    break
                found = cursor.add(sequence, message.headers or {}, message.data)
                if found is not None:
                    frames.append(found)
                if sequence == cursor.end or message.metadata.num_pending == 0:
                    cursor.done = True
                    break
        if cursor.done:
            await cursor.subscription.unsubscribe()
            return frames, None
        return frames, cursor

    async def _start_reading(self) -> _Reading:
        """A consumer of the frames subject from its first message kept; where to stop."""
        await self._ensure_stream()
        info = await self._settled(lambda: self._js.stream_info(self.stream))
        config = api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.ALL,
            ack_policy=api.AckPolicy.NONE,
            inactive_threshold=60.0,
            filter_subject=self.frames_subject,
        )
        subscription = await self._settled(
            lambda: self._js.pull_subscribe(self.frames_subject, stream=self.stream, config=config)
        )
        reading = _Reading(subscription, info.state.last_seq)
        if (await self._settled(subscription.consumer_info)).num_pending == 0:
            reading.done = True  # no frame at all
        return reading


class _Reading:
    """A ``read_all`` under way: its consumer, where it ends, a split frame being put together."""

    def __init__(self, subscription: Any, end: int) -> None:
        self.subscription, self.end = subscription, end
        self.done = end == 0
        self.parts: list[bytes] = []
        self.first = 0

    def add(
        self, sequence: int, headers: dict[str, str], data: bytes
    ) -> tuple[LogAddress, bytes] | None:
        """A message in order; the frame it completes, if any."""
        part = headers.get(PART_HEADER)
        if part is None:
            self.parts = []  # (a split frame left unfinished is dropped)
            return LogAddress(sequence, 0, sequence), data
        number, count = (int(x) for x in part.split("/"))
        if number == 1:
            self.parts, self.first = [], sequence
        elif number != len(self.parts) + 1:
            self.parts = []  # a gap: that frame is incomplete
            return None
        self.parts.append(data)
        if number == count:
            frame = b"".join(self.parts)
            self.parts = []
            return LogAddress(sequence, 0, self.first), frame
        return None
