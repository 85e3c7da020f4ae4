"""In-memory tier backends (tier-1 and tier-2) with fault and latency injection.

Responsibility: the ``memory`` plugins of both tiers. They are real, selectable backends
(``is_durable = False``) used by tests and seeded simulations; instances sharing a store see each
other's data, so a second container instance can fence the first.

Its modules:

* ``chunks``: ``MemoryChunkStorage``
* ``faults``: deterministic fault and latency injection for the in-memory tiers
* ``log``: ``MemoryDurableDataLog``
"""

from tiers.memory.chunks import (
    MemoryChunkStorage,
    MemoryChunkStore,
    MemoryObjectChunkStorage,
    chunk_store,
    clear_chunk_stores,
)
from tiers.memory.faults import FaultInjector
from tiers.memory.log import MemoryDurableDataLog, MemoryLogStore, clear_log_stores, log_store

__all__ = [
    "FaultInjector",
    "MemoryChunkStorage",
    "MemoryChunkStore",
    "MemoryDurableDataLog",
    "MemoryLogStore",
    "MemoryObjectChunkStorage",
    "chunk_store",
    "clear_chunk_stores",
    "clear_log_stores",
    "log_store",
]
