"""Typed configuration of the segment store engine (one frozen dataclass per component).

Settings are turned into these once, at the edge (CLI or Django app config); the engine never
reads the environment.
"""

from __future__ import annotations

import dataclasses

from millrace.kernel import defaults
from millrace.kernel.config import SegmentStoreSettings


@dataclasses.dataclass(frozen=True, slots=True)
class DurableLogConfig:
    #: Largest data frame written to tier-1 in one append.
    frame_bytes_max: int = defaults.FRAME_BYTES_MAX
    #: Data frames written to tier-1 but not yet acknowledged, at most.
    frames_in_flight_max: int = 8
    #: A frame of at most this many bytes, with no other in flight, is written on the event
    #: loop's thread where tier-1 allows (``DurableDataLog.append_now``): a lone small write
    #: takes less than the hand-over to tier-1's writer thread and back. 0: never.
    inline_frame_bytes_max: int = 64 * 1024
    #: Operations accepted into one processor pass at most (bounds a pass's latency).
    batch_operations_max: int = 20_000
    #: A metadata checkpoint is written after this many operations ...
    checkpoint_operations_min: int = 50_000
    #: ... or this many bytes of operations, whichever comes first.
    checkpoint_bytes_min: int = 256 * 1024 * 1024
    #: While tier-2 is behind and the cache is full, new operations are retried at this pace.
    throttle_delay_ms: int = 2
    #: Held back this long, appends are refused with a retriable error instead of waiting on.
    refuse_after_ms: int = SegmentStoreSettings.backlog_refuse_ms
    #: Test-only: when False, frame CRCs are not verified on recovery (proves the CRC test).
    verify_crc: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class ReadIndexConfig:
    #: Bytes of segment data the cache keeps; only data already in tier-2 can be evicted.
    cache_bytes_max: int = SegmentStoreSettings.cache_bytes
    #: Appends are coalesced into cache entries of at most this size.
    cache_entry_bytes_max: int = 1024 * 1024
    #: Bytes fetched from tier-2 per read at most.
    storage_read_bytes_max: int = 2 * 1024 * 1024
    #: A tier-2 read that has not answered in this long fails the read (retriable).
    storage_read_timeout_ms: int = 10_000
    #: The on-disk cache (LMDB): its directory ('' = none) and how many bytes it holds.
    disk_cache_path: str = ""
    disk_cache_bytes_max: int = SegmentStoreSettings.cache_disk_bytes


@dataclasses.dataclass(frozen=True, slots=True)
class StorageWriterConfig:
    #: A segment's unflushed data is written once it reaches this many bytes ...
    flush_bytes_min: int = SegmentStoreSettings.tier2_flush_bytes
    #: ... or once its oldest unflushed byte is this old.
    flush_delay_ms: int = 1000
    #: Largest single write to tier-2.
    write_bytes_max: int = 16 * 1024 * 1024
    #: A chunk is closed and a new one started past this length.
    chunk_bytes_max: int = 128 * 1024 * 1024
    #: Segments with only appends to flush are written together, this many per tier-2 call.
    flush_batch_max: int = 256
    #: Pause between passes when there is nothing to do.
    idle_delay_ms: int = 50
    #: Back-off after a failed tier-2 operation.
    retry_delay_ms: int = 200


@dataclasses.dataclass(frozen=True, slots=True)
class ContainerConfig:
    durable_log: DurableLogConfig = DurableLogConfig()
    read_index: ReadIndexConfig = ReadIndexConfig()
    storage_writer: StorageWriterConfig = StorageWriterConfig()
    #: Largest append accepted in one operation (Pravega's limit is 8 MiB + event header).
    append_bytes_max: int = 8 * 1024 * 1024 + 1024
    #: Test-only: when False, idempotent-writer deduplication is skipped (proves the dedup test).
    deduplicate: bool = True
    #: Test-only: when False, the container skips tier-1 fencing on start (proves the fencing test).
    fence: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentStoreConfig:
    container_count: int = SegmentStoreSettings.container_count
    container: ContainerConfig = ContainerConfig()
    #: Restart a failed (not fenced) container after this delay.
    restart_delay_ms: int = 500
