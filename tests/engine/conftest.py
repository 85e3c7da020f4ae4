"""Fixtures for engine tests: containers on shared in-memory tiers that can be restarted."""

from __future__ import annotations

import dataclasses

import pytest

from segment_app.engine.config import (
    ContainerConfig,
    DurableLogConfig,
    ReadIndexConfig,
    StorageWriterConfig,
)
from segment_app.engine.containers.container import SegmentContainer
from tiers.memory import MemoryChunkStorage, MemoryDurableDataLog
from tiers.memory.chunks import MemoryChunkStore
from tiers.memory.faults import FaultInjector
from tiers.memory.log import MemoryLogStore


def fast_config(**overrides: object) -> ContainerConfig:
    """A container config with short delays and small limits, so tests exercise every path."""
    config = ContainerConfig(
        durable_log=DurableLogConfig(
            checkpoint_operations_min=50, frame_bytes_max=1 << 20, inline_frame_bytes_max=16384
        ),
        read_index=ReadIndexConfig(cache_bytes_max=1 << 20, cache_entry_bytes_max=4096),
        storage_writer=StorageWriterConfig(
            flush_bytes_min=8192,
            flush_delay_ms=20,
            idle_delay_ms=5,
            retry_delay_ms=5,
            chunk_bytes_max=32 * 1024,
        ),
        append_bytes_max=64 * 1024,
    )
    return dataclasses.replace(config, **overrides)  # type: ignore[arg-type]


@dataclasses.dataclass
class Tiers:
    """The 'disks' of one container: they outlive container instances."""

    log_store: MemoryLogStore = dataclasses.field(default_factory=MemoryLogStore)
    chunk_store: MemoryChunkStore = dataclasses.field(default_factory=MemoryChunkStore)
    log_faults: FaultInjector = dataclasses.field(default_factory=lambda: FaultInjector(1))
    chunk_faults: FaultInjector = dataclasses.field(default_factory=lambda: FaultInjector(2))
    config: ContainerConfig = dataclasses.field(default_factory=fast_config)
    #: Lone frames written at once (``append_now``), as on the file tier-1, or all queued.
    inline: bool = False

    def container(self) -> SegmentContainer:
        return SegmentContainer(
            0,
            MemoryDurableDataLog(
                store=self.log_store,
                faults=self.log_faults,
                frame_bytes_max=1 << 21,
                appends_inline=self.inline,
            ),
            MemoryChunkStorage(store=self.chunk_store, faults=self.chunk_faults),
            self.config,
        )

    async def start(self) -> SegmentContainer:
        container = self.container()
        await container.start()
        return container


@pytest.fixture(params=[False, True], ids=["queued", "inline"])
def tiers(request: pytest.FixtureRequest) -> Tiers:
    return Tiers(inline=request.param)
