"""The durable log: operation queue, processor, group commit to tier-1, checkpoints, truncation.

Callers ``add`` a request and get a future, or ``add_appends`` many plain appends and get one
future completed once all of them are answered (the wire server's appends of one read
buffer). One processor task drains the whole queue at a time, validates every operation
(``MetadataUpdater``), packs the accepted ones into data frames and hands the frames to tier-1
without waiting, up to ``frames_in_flight_max`` at once. A completer task awaits the frames in
order; only when a frame is durable are its operations applied to the metadata, passed to
``on_commit`` (read index, storage writer) and their futures completed. A small frame with none
in flight is written on the loop's thread instead, where tier-1 can (``append_now``), and
committed at once: nothing would share its write, and a hand-over to tier-1's writer thread
and back costs more than the write. Appends queued by ``add_appends`` skip the per-operation
objects: each becomes an ``AppendRecord`` tuple, written with the bytes an ``Append`` would
have, and a frame's run of them is applied and passed to ``on_appends`` in one call.

A failed frame rolls back the pending view and fails its callers and every later one; the log
is then failed (``failure``) and the container must restart, recovering from tier-1, which is the
truth. Every ``checkpoint_operations_min`` operations a metadata checkpoint is written; tier-1
is truncated up to the newest checkpoint all of whose preceding operations are in tier-2.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import ClassVar

from segment_app.engine.api import AppendItem
from segment_app.engine.config import DurableLogConfig
from segment_app.engine.containers.metadata import ContainerMetadata
from segment_app.engine.containers.updater import NO_WRITE, MetadataUpdater, Request
from segment_app.engine.errors import (
    ContainerOfflineError,
    EngineError,
    TierBackloggedError,
    TooLargeError,
)
from segment_app.engine.logs.frames import APPEND_RECORD_BYTES, FRAME_HEADER_SIZE, FrameBuilder
from segment_app.engine.logs.operations import (
    Append,
    AppendRecord,
    MetadataCheckpoint,
    Operation,
    encode_operation,
)
from tiers.base import DataLogFencedError, DurableDataLog, LogAddress, frame_size

__all__ = ["DurableLog"]

log = logging.getLogger(__name__)

CommitCallback = Callable[[Operation], None]
AppendsCallback = Callable[[list[AppendRecord]], None]


@dataclasses.dataclass(slots=True)
class _Appends:
    """Plain appends queued together by ``add_appends``."""

    items: Sequence[AppendItem]
    internal: ClassVar[bool] = False
    result: ClassVar[None] = None


#: A queued request (or plain appends) and its future.
_Entry = tuple["Request | _Appends", "asyncio.Future[object]"]


@dataclasses.dataclass(slots=True)
class _Frame:
    task: asyncio.Future[LogAddress] | None
    #: Operations, and runs of appends (``add_appends``), in sequence order.
    ops: list[Operation | list[AppendRecord]]
    requests: list[_Entry]
    checkpoint: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class _Checkpoint:
    sequence: int
    #: Address of the frame just before the checkpoint frame (truncate up to it).
    before: LogAddress | None


class DurableLog:
    def __init__(
        self,
        data_log: DurableDataLog,
        metadata: ContainerMetadata,
        config: DurableLogConfig,
        *,
        on_commit: CommitCallback,
        on_appends: AppendsCallback | None = None,
        now_ms: Callable[[], int],
        deduplicate: bool = True,
        over_budget: Callable[[], bool] = lambda: False,
    ) -> None:
        self.data_log = data_log
        self.metadata = metadata
        self.config = config
        self.on_commit = on_commit
        self.on_appends = on_appends or self._appends_one_by_one
        self.now_ms = now_ms
        self.over_budget = over_budget
        self.throttled_seconds = 0.0
        #: Frames written on the loop's thread (``append_now``) rather than handed over.
        self.inline_frames = 0
        #: When appends began to be held back (ms, ``now_ms``), while they are.
        self._held_since: int | None = None
        self.updater = MetadataUpdater(metadata, deduplicate=deduplicate)
        self.failure: BaseException | None = None
        self.last_address: LogAddress | None = None
        self._queue: list[_Entry] = []
        self._wakeup = asyncio.Event()
        self._in_flight: collections.deque[_Frame] = collections.deque()
        self._frame_done = asyncio.Event()
        self._checkpoints: list[_Checkpoint] = []
        self._checkpoint_waiters: list[asyncio.Future[object]] = []
        self._ops_since_checkpoint = 0
        self._bytes_since_checkpoint = 0
        self._sequence = metadata.sequence
        self._processor: asyncio.Task[None] | None = None
        self._completer: asyncio.Task[None] | None = None
        self._completer_wakeup = asyncio.Event()
        self._stopping = False

    # -- lifecycle --------------------------------------------------------------------------------

    def start(
        self,
        recovered_checkpoints: list[tuple[int, LogAddress | None]],
        last_address: LogAddress | None,
    ) -> None:
        self._sequence = self.metadata.sequence
        self.last_address = last_address
        self._checkpoints = [_Checkpoint(s, a) for s, a in recovered_checkpoints]
        self._processor = asyncio.create_task(self._process(), name="durable-log-processor")
        self._completer = asyncio.create_task(self._complete(), name="durable-log-completer")

    async def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()
        self._completer_wakeup.set()
        for task in (self._processor, self._completer):
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in (self._processor, self._completer) if t), return_exceptions=True
        )
        self._fail_all(ContainerOfflineError("container stopped"))

    # -- public -----------------------------------------------------------------------------------

    def add(self, request: Request) -> asyncio.Future[object]:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if self.failure is not None or self._stopping:
            future.set_exception(ContainerOfflineError(f"container is offline: {self.failure}"))
            return future
        self._queue.append((request, future))
        self._wakeup.set()
        return future

    def add_appends(self, items: Sequence[AppendItem]) -> asyncio.Future[object]:
        """Queue plain appends (``item.data`` at most ``append_bytes_max``) with one future,
        completed once every one is durable or rejected: each item then has its ``result`` or
        ``error``. The future fails if the log fails (then no item's outcome can be trusted)."""
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if self.failure is not None or self._stopping:
            future.set_exception(ContainerOfflineError(f"container is offline: {self.failure}"))
            return future
        self._queue.append((_Appends(items), future))
        self._wakeup.set()
        return future

    def _appends_one_by_one(self, records: list[AppendRecord]) -> None:
        for sequence, segment_id, offset, data, writer_id, event_number in records:
            self.on_commit(
                Append(
                    segment_id,
                    data,
                    offset,
                    writer_id,
                    event_number,
                    sequence=sequence,
                )
            )

    async def truncate_before(self, lowest_unapplied_sequence: int) -> bool:
        """Truncate tier-1 at the newest checkpoint below ``lowest_unapplied_sequence``."""
        eligible = [c for c in self._checkpoints if c.sequence < lowest_unapplied_sequence]
        if not eligible:
            return False
        target = eligible[-1]
        self._checkpoints = [c for c in self._checkpoints if c.sequence > target.sequence]
        if target.before is None:
            return False  # the checkpoint is already the first frame of the log
        await self.data_log.truncate(target.before)
        return True

    # -- processor --------------------------------------------------------------------------------

    async def _process(self) -> None:
        try:
            while not self._stopping:
                await self._wakeup.wait()
                self._wakeup.clear()
                while (self._queue or self._checkpoint_waiters) and self.failure is None:
                    if self._queue:
                        batch = self._take_batch()
                        if not batch:
                            await self._hold_back()
                            continue
                        if not self._in_flight:
                            self.updater.clear()  # everything accepted is committed
                        await self._process_batch(batch)
                    if self._checkpoint_due() or self._checkpoint_waiters:
                        await self._write_checkpoint()
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            if self.failure is None:  # (else the failure is logged already: tier-1's)
                log.exception("durable log processor failed")
            self._fail(error)

    def _take_batch(self) -> list[_Entry]:
        """The next requests to process; only internal ones while the cache is over budget."""
        if self.over_budget():
            batch = [item for item in self._queue if item[0].internal]
            if batch:
                self._queue = [item for item in self._queue if not item[0].internal]
            self._refuse_held_appends()
            return batch
        self._held_since = None
        limit, taken, count = self.config.batch_operations_max, 0, 0
        for request, _ in self._queue:
            count += len(request.items) if type(request) is _Appends else 1
            taken += 1
            if count >= limit:
                break
        batch = self._queue[:taken]
        del self._queue[:taken]
        return batch

    def _refuse_held_appends(self) -> None:
        """Held back ``refuse_after_ms`` already: refuse the waiting appends (and the next,
        until tier-2 catches up) with a retriable error rather than let them wait on."""
        now = self.now_ms()
        if self._held_since is None:
            self._held_since = now
        held = now - self._held_since
        if held < self.config.refuse_after_ms:
            return
        message = (
            f"appends refused: tier-2 is behind and the data waiting for it fills the cache"
            f" (held back {held / 1000:.1f} s); retry later"
        )
        kept: list[_Entry] = []
        for request, future in self._queue:
            if isinstance(request, _Appends) or isinstance(request.op, Append):
                if not future.done():
                    future.set_exception(TierBackloggedError(message))
            else:
                kept.append((request, future))
        self._queue = kept

    async def _hold_back(self) -> None:
        """Throttle: tier-2 is behind and unflushed data fills the cache; wait for it."""
        before = self.throttled_seconds
        await asyncio.sleep(self.config.throttle_delay_ms / 1000)
        self.throttled_seconds += self.config.throttle_delay_ms / 1000
        if int(self.throttled_seconds / 5) > int(before / 5):
            log.warning("appends held back %.0f s so far: tier-2 is behind", self.throttled_seconds)

    async def _process_batch(self, batch: list[_Entry]) -> None:
        """Frame and send the batch's requests; if that fails (the log failed while waiting for
        a frame slot, or stops), every request of it not answered yet is (the batch is off
        the queue, so ``_fail_all`` does not see it)."""
        try:
            await self._frame_batch(batch)
        except BaseException as error:
            _answer_offline(batch, error)
            raise

    async def _frame_batch(self, batch: list[_Entry]) -> None:
        builder = FrameBuilder(self.config.frame_bytes_max)
        frame = _Frame(None, [], [])
        for index, (request, future) in enumerate(batch):
            if type(request) is _Appends:
                filled = await self._process_appends(request, future, builder, frame)
                if filled is None:
                    self._refuse_rest(batch[index + 1 :])
                    return
                frame = filled
                continue
            assert isinstance(request, Request)
            try:
                accepted = self.updater.accept(request)
            except EngineError as error:
                future.set_exception(error)
                continue
            if accepted is NO_WRITE:
                frame.requests.append((request, future))
                continue
            op = request.op
            self._sequence += 1
            op.sequence = self._sequence
            parts = encode_operation(op)
            size = builder.encoded_size(parts)
            if size + FRAME_HEADER_SIZE > self.config.frame_bytes_max:
                self._too_large(size, future)
                self._refuse_rest(frame.requests, batch[index + 1 :])
                return
            if not builder.fits(size) and not builder.empty:
                await self._send(builder, frame)
                frame = _Frame(None, [], [])
            builder.add(op, parts, size)
            frame.ops.append(op)
            frame.requests.append((request, future))
            self._ops_since_checkpoint += 1
            self._bytes_since_checkpoint += size
        if not builder.empty:
            await self._send(builder, frame)
        elif frame.requests:
            self._attach_no_writes(frame)

    async def _process_appends(
        self,
        appends: _Appends,
        future: asyncio.Future[object],
        builder: FrameBuilder,
        frame: _Frame,
    ) -> _Frame | None:
        """``_process_batch`` for the appends of one ``add_appends``: each is accepted, given
        its sequence number and added to the frame as a record (no ``Append`` object); the
        frame being filled is returned (None if an append did not fit a frame: the log failed).
        """
        admit = self.updater.admit_append
        room = self.config.frame_bytes_max - FRAME_HEADER_SIZE
        run: list[AppendRecord] | None = None
        count = total = 0
        for item in appends.items:
            data, writer_id, event_number = item.data, item.writer_id, item.event_number
            if event_number is None:
                event_number = 0
            try:
                item.result, segment_id, offset = admit(
                    item.segment, len(data), writer_id, event_number, item.expected_offset
                )
            except EngineError as error:
                item.error = error
                continue
            if offset < 0:
                continue  # a duplicate: acknowledged, not written
            size = APPEND_RECORD_BYTES + len(data)
            if size > room:  # as for ``Append`` requests: the group's future is that of its last
                self._too_large(size, future if item is appends.items[-1] else None)
                frame.requests.append((appends, future))
                self._refuse_rest(frame.requests)
                return None
            if not builder.fits(size) and not builder.empty:
                await self._send(builder, frame)
                frame, run = _Frame(None, [], []), None
            if run is None:
                last = frame.ops[-1] if frame.ops else None
                if type(last) is list:
                    run = last
                else:
                    run = []
                    frame.ops.append(run)
            self._sequence += 1
            sequence = self._sequence
            builder.add_append(sequence, segment_id, offset, writer_id, event_number, data)
            run.append((sequence, segment_id, offset, data, writer_id, event_number))
            count += 1
            total += size
        self._ops_since_checkpoint += count
        self._bytes_since_checkpoint += total
        frame.requests.append((appends, future))
        return frame

    def _too_large(self, size: int, future: asyncio.Future[object] | None) -> None:
        self._fail(TooLargeError(f"operation of {size} bytes exceeds a frame"))
        if future is not None:
            future.set_exception(TooLargeError("operation exceeds the frame size"))

    @staticmethod
    def _refuse_rest(*waiting: list[_Entry]) -> None:
        offline = ContainerOfflineError("an operation exceeded the frame size")
        for entries in waiting:
            _answer_offline(entries, offline)

    def _attach_no_writes(self, frame: _Frame) -> None:
        if self._in_flight:
            self._in_flight[-1].requests.extend(frame.requests)
            return
        for request, future in frame.requests:
            if not future.done():
                future.set_result(request.result)

    async def _send(self, builder: FrameBuilder, frame: _Frame) -> None:
        while len(self._in_flight) >= self.config.frames_in_flight_max:
            self._frame_done.clear()
            await self._frame_done.wait()
            if self.failure is not None:
                raise ContainerOfflineError(f"durable log failed: {self.failure}")
        data = builder.close()
        if not self._in_flight and frame_size(data) <= self.config.inline_frame_bytes_max:
            self._in_flight.append(frame)  # (where ``_fail`` finds its requests)
            try:
                address = self.data_log.append_now(data)
            except Exception as error:
                self._fail(error)
                raise ContainerOfflineError(f"durable log failed: {error!r}") from error
            self._in_flight.pop()
            if address is not None:
                self.inline_frames += 1
                self._commit(frame, address)
                self._frame_done.set()
                return
        frame.task = asyncio.ensure_future(self.data_log.append(data))
        self._in_flight.append(frame)
        self._completer_wakeup.set()

    # -- checkpoints ------------------------------------------------------------------------------

    def _checkpoint_due(self) -> bool:
        return (
            self._ops_since_checkpoint >= self.config.checkpoint_operations_min
            or self._bytes_since_checkpoint >= self.config.checkpoint_bytes_min
        )

    async def write_checkpoint(self) -> None:
        """Write a metadata checkpoint now (the container does so at the end of recovery)."""
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if self.failure is not None or self._stopping:
            raise ContainerOfflineError(f"container is offline: {self.failure}")
        self._checkpoint_waiters.append(future)
        self._wakeup.set()
        await future

    async def _write_checkpoint(self) -> None:
        await self._drain()
        if self.failure is not None:
            return
        self._sequence += 1
        op = MetadataCheckpoint(snapshot=self.metadata.snapshot(), sequence=self._sequence)
        builder = FrameBuilder(max(self.config.frame_bytes_max, len(op.snapshot) * 2 + 4096))
        builder.add(op)
        request = Request(op)
        waiters, self._checkpoint_waiters = self._checkpoint_waiters, []
        requests: list[_Entry] = [(request, w) for w in waiters]
        try:
            await self._send(builder, _Frame(None, [op], requests, checkpoint=True))
        except BaseException as error:
            _answer_offline(requests, error)
            raise
        self._ops_since_checkpoint = 0
        self._bytes_since_checkpoint = 0

    async def _drain(self) -> None:
        while self._in_flight and self.failure is None:
            self._frame_done.clear()
            await self._frame_done.wait()

    # -- completer --------------------------------------------------------------------------------

    async def _complete(self) -> None:
        while not self._stopping:
            if not self._in_flight:
                self._completer_wakeup.clear()
                await self._completer_wakeup.wait()
                continue
            frame = self._in_flight[0]
            assert frame.task is not None
            try:
                address = await asyncio.shield(frame.task)
            except asyncio.CancelledError:
                raise
            except BaseException as error:
                self._fail(error)
                return
            self._in_flight.popleft()
            self._commit(frame, address)
            self._frame_done.set()

    def _commit(self, frame: _Frame, address: LogAddress) -> None:
        now = self.now_ms()
        if frame.checkpoint:
            checkpoint = frame.ops[0]
            assert isinstance(checkpoint, MetadataCheckpoint)
            self._checkpoints.append(_Checkpoint(checkpoint.sequence, self.last_address))
        for op in frame.ops:
            if type(op) is list:
                self.metadata.apply_appends(op, now)
                self.on_appends(op)
            else:
                assert isinstance(op, Operation)
                self.metadata.apply(op, now)
                self.on_commit(op)
        self.last_address = address
        for request, future in frame.requests:
            if not future.done():
                future.set_result(request.result)

    # -- failure ----------------------------------------------------------------------------------

    def fail(self, error: BaseException) -> None:
        """Take the container offline (e.g. tier-1 says another instance fenced this one)."""
        self._fail(error)

    def _fail(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
            if isinstance(error, DataLogFencedError):  # another owner took over: expected
                log.warning("container fenced by a newer owner; it goes offline here: %s", error)
            else:
                log.error("durable log failed; container goes offline: %r", error)
        self.updater.clear()
        self._fail_all(ContainerOfflineError(f"tier-1 write failed, rolled back: {error!r}"))
        self._frame_done.set()

    def _fail_all(self, error: EngineError) -> None:
        while self._in_flight:
            frame = self._in_flight.popleft()
            if frame.task is not None:  # its own error is known already: do not log it again
                frame.task.add_done_callback(_retrieve)
            for _, future in frame.requests:
                if not future.done():
                    future.set_exception(error)
        queue, self._queue = self._queue, []
        waiters, self._checkpoint_waiters = self._checkpoint_waiters, []
        for future in [f for _, f in queue] + waiters:
            if not future.done():
                future.set_exception(error)


def _answer_offline(entries: list[_Entry], error: BaseException) -> None:
    """Fail the futures of ``entries`` not answered yet: the container is offline."""
    offline = (
        error
        if isinstance(error, ContainerOfflineError)
        else ContainerOfflineError(f"durable log stopped or failed: {error!r}")
    )
    for _, future in entries:
        if not future.done():
            future.set_exception(offline)


def _retrieve(task: asyncio.Future[LogAddress]) -> None:
    if not task.cancelled():
        task.exception()
