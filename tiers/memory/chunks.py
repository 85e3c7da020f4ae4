"""``MemoryChunkStorage``: tier-2 in process memory, for tests and simulations.

Responsibility: real, selectable tier-2 backends keeping chunks in a ``MemoryChunkStore`` that
several instances can share (as several nodes share one filesystem or bucket), with fault and
latency injection. ``MemoryChunkStorage`` appends and concatenates natively;
``MemoryObjectChunkStorage`` behaves like an object store (no append, no concat) so engine code
paths for such tiers can be tested without S3.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar, TypeVarTuple, Unpack

from tiers.base import (
    BadChunkOffsetError,
    ChunkExistsError,
    ChunkNotFoundError,
    ChunkStorage,
    StorageError,
)
from tiers.memory.faults import FaultInjector, inject

__all__ = [
    "MemoryChunkStorage",
    "MemoryChunkStore",
    "MemoryObjectChunkStorage",
    "chunk_store",
    "clear_chunk_stores",
]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


class MemoryChunkStore:
    """The chunks of one in-memory tier-2 (the part a filesystem or bucket would hold)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.chunks: dict[str, bytearray] = {}

    def total_bytes(self) -> int:
        with self.lock:
            return sum(len(data) for data in self.chunks.values())


_STORES: dict[str, MemoryChunkStore] = {}
_STORES_LOCK = threading.Lock()


def chunk_store(store_id: str) -> MemoryChunkStore:
    """The process-global chunk store named ``store_id`` (created on first use)."""
    with _STORES_LOCK:
        return _STORES.setdefault(store_id, MemoryChunkStore())


def clear_chunk_stores() -> None:
    """Forget every process-global chunk store (for test isolation)."""
    with _STORES_LOCK:
        _STORES.clear()


class MemoryChunkStorage(ChunkStorage):
    """Tier-2 in memory with native append and concat; can inject faults and latency.

    Options: ``store`` (a ``MemoryChunkStore`` to share), else ``store_id`` (name of a
    process-global store), else a private new store; ``faults`` (a ``FaultInjector``).
    """

    name = "memory"
    supports_append = True
    supports_concat = True
    is_durable = False
    blocking = False

    def __init__(
        self,
        *,
        store_id: str | None = None,
        store: MemoryChunkStore | None = None,
        faults: FaultInjector | None = None,
    ) -> None:
        if store is None:
            store = chunk_store(store_id) if store_id is not None else MemoryChunkStore()
        self.store = store
        self.faults = faults

    async def _call(self, fn: Callable[[Unpack[_Ts]], _T], *args: *_Ts) -> _T:
        await inject(self.faults, fn, StorageError)
        return await super()._call(fn, *args)

    def _get(self, name: str) -> bytearray:
        """The chunk's bytes (call with the store lock held)."""
        try:
            return self.store.chunks[name]
        except KeyError:
            raise ChunkNotFoundError(f"chunk {name!r} not found") from None

    def _do_create(self, name: str) -> None:
        self._do_create_with_data(name, b"")

    def _do_create_with_data(self, name: str, data: bytes | memoryview) -> None:
        with self.store.lock:
            if name in self.store.chunks:
                raise ChunkExistsError(f"chunk {name!r} exists")
            self.store.chunks[name] = bytearray(data)

    def _do_write(self, name: str, offset: int, data: bytes | memoryview) -> None:
        with self.store.lock:
            chunk = self._get(name)
            if offset != len(chunk):
                raise BadChunkOffsetError(
                    f"chunk {name!r}: write at {offset} but its length is {len(chunk)}"
                )
            chunk += data

    def _do_read(self, name: str, offset: int, length: int) -> bytes:
        with self.store.lock:
            return bytes(self._get(name)[offset : offset + length])

    def _do_delete(self, name: str) -> None:
        with self.store.lock:
            self._get(name)
            del self.store.chunks[name]

    def _do_exists(self, name: str) -> bool:
        with self.store.lock:
            return name in self.store.chunks

    def _do_length(self, name: str) -> int:
        with self.store.lock:
            return len(self._get(name))

    def _do_concat(self, target: str, sources: list[str]) -> int:
        with self.store.lock:
            chunk = self._get(target)
            parts = [self._get(source) for source in sources]  # all exist before any change
            for part in parts:
                chunk += part
            return len(chunk)


class MemoryObjectChunkStorage(MemoryChunkStorage):
    """Tier-2 in memory that behaves like an object store: no append, no native concat."""

    name = "memory-object"
    supports_append = False
    supports_concat = False
