"""``MemoryDurableDataLog``: tier-1 in process memory, for tests and simulations.

Responsibility: a real, selectable tier-1 backend that keeps frames in a ``MemoryLogStore``.
The store plays the part of the disk: it outlives the log instances attached to it, so a test
can "restart" a container by opening a new instance on the same store with a higher epoch, and
watch it fence the old one exactly as the contract says. Not durable across the process.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, TypeVarTuple, Unpack

from millrace.kernel import defaults
from tiers.base import (
    DataLogError,
    DataLogFencedError,
    DurableDataLog,
    Frame,
    LogAddress,
    frame_bytes,
    frame_size,
)
from tiers.memory.faults import FaultInjector, inject

__all__ = ["MemoryDurableDataLog", "MemoryLogStore", "clear_log_stores", "log_store"]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


class MemoryLogStore:
    """What one in-memory log keeps between instances (the part a disk would hold)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: The highest epoch any instance opened the log with (-1: never opened).
        self.epoch = -1
        #: Frames not truncated, in sequence order.
        self.frames: list[tuple[LogAddress, bytes]] = []
        self.next_sequence = 1
        #: Each open starts a new "ledger" so addresses also tell which epoch wrote a frame.
        self.ledger = 0
        self.ledger_offset = 0
        self.truncated_sequence = 0

    def total_bytes(self) -> int:
        with self.lock:
            return sum(len(frame) for _, frame in self.frames)


_STORES: dict[str, MemoryLogStore] = {}
_STORES_LOCK = threading.Lock()


def log_store(log_id: str) -> MemoryLogStore:
    """The process-global store of the log named ``log_id`` (created on first use)."""
    with _STORES_LOCK:
        return _STORES.setdefault(log_id, MemoryLogStore())


def clear_log_stores() -> None:
    """Forget every process-global log store (for test isolation)."""
    with _STORES_LOCK:
        _STORES.clear()


class MemoryDurableDataLog(DurableDataLog):
    """Tier-1 in memory: fenced, ordered, truncatable; can inject faults and latency.

    Options: ``store`` (a ``MemoryLogStore`` to share), else ``log_id`` (name of a process-global
    store), else a private new store; ``faults`` (a ``FaultInjector``); ``read_batch_frames_max``;
    ``appends_inline`` (``append_now`` writes at once, as the file tier-1 does; off by default).
    """

    name = "memory"
    is_durable = False
    supports_fencing = True
    blocking = False

    @classmethod
    def default_options(cls, data_dir: str, log_id: str) -> dict[str, Any]:
        """Each container's log is the process-global log named ``log_id``."""
        return {"log_id": log_id}

    def __init__(
        self,
        *,
        log_id: str | None = None,
        store: MemoryLogStore | None = None,
        faults: FaultInjector | None = None,
        frame_bytes_max: int = defaults.FRAME_BYTES_MAX,
        batch_frames_max: int = 256,
        read_batch_frames_max: int = 1024,
        appends_inline: bool = False,
    ) -> None:
        super().__init__(frame_bytes_max=frame_bytes_max, batch_frames_max=batch_frames_max)
        self.appends_inline = appends_inline  # type: ignore[misc]
        if store is None:
            store = log_store(log_id) if log_id is not None else MemoryLogStore()
        self.store = store
        self.faults = faults
        self.read_batch_frames_max = read_batch_frames_max
        self._owned_epoch: int | None = None

    async def _call(self, fn: Callable[[Unpack[_Ts]], _T], *args: *_Ts) -> _T:
        await inject(self.faults, fn, DataLogError)
        return await super()._call(fn, *args)

    def _append_inline(self, frames: Sequence[Frame]) -> list[LogAddress] | None:
        if self.faults is not None:
            if self.faults.delay_for("append_batch"):
                return None  # a latency to wait out: ``append`` awaits it
            self.faults.check("append_batch", DataLogError)
        return self._do_append_batch(frames)

    def _check_owner(self) -> None:
        """Raise unless this instance still owns the store (call with the store lock held)."""
        if self._owned_epoch is None or self.store.epoch != self._owned_epoch:
            raise DataLogFencedError(
                f"memory log fenced: epoch {self.store.epoch} > ours {self._owned_epoch}"
            )

    def _do_check_fenced(self) -> None:
        with self.store.lock:
            self._check_owner()

    def _do_current_epoch(self) -> int:
        with self.store.lock:
            return max(self.store.epoch, 0)

    def _do_open(self, epoch: int) -> None:
        store = self.store
        with store.lock:
            if epoch <= store.epoch:
                raise DataLogFencedError(f"cannot open with epoch {epoch}: log is at {store.epoch}")
            store.epoch = epoch
            store.ledger += 1
            store.ledger_offset = 0
            self._owned_epoch = epoch

    def _do_append_batch(self, frames: Sequence[Frame]) -> list[LogAddress]:
        store = self.store
        with store.lock:
            self._check_owner()
            addresses = []
            for frame in frames:
                address = LogAddress(store.next_sequence, store.ledger, store.ledger_offset)
                store.frames.append((address, bytes(frame_bytes(frame))))
                store.next_sequence += 1
                store.ledger_offset += frame_size(frame)
                addresses.append(address)
            return addresses

    def _do_read_batch(self, cursor: object) -> tuple[list[tuple[LogAddress, bytes]], object]:
        after = cursor if isinstance(cursor, int) else 0
        store = self.store
        with store.lock:
            self._check_owner()
            start = bisect.bisect_right(store.frames, after, key=lambda item: item[0].sequence)
            batch = store.frames[start : start + self.read_batch_frames_max]
            more = start + len(batch) < len(store.frames)
        next_cursor = batch[-1][0].sequence if batch and more else None
        return batch, next_cursor

    def _do_truncate(self, upto: LogAddress) -> None:
        store = self.store
        with store.lock:
            self._check_owner()
            store.truncated_sequence = max(store.truncated_sequence, upto.sequence)
            keep = bisect.bisect_right(
                store.frames, store.truncated_sequence, key=lambda item: item[0].sequence
            )
            del store.frames[:keep]

    def _do_close(self) -> None:
        self._owned_epoch = None
