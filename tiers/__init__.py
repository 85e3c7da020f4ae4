"""Storage tiers of Millrace: the tier-1 durable data log and tier-2 chunk storage plugins.

Responsibility: the package root holds the interfaces (``tiers.base``) and the registry that
builds a backend by name (``tiers.registry``); each backend lives in its own subpackage
(``tiers.memory``, ``tiers.file``, ``tiers.filesystem``) and is imported only when selected.

Its other modules:

* ``direct_io``: writes that bypass the page cache (``O_DIRECT``), for the tiers that write
  local files
* ``hdfs``: the ``hdfs`` tier-2 backend
* ``jetstream``: the ``jetstream`` tier-1 backend
* ``s3``: the ``s3`` tier-2 backend
* ``testing``: what every tier backend's tests share
"""

from tiers.base import (
    BadChunkOffsetError,
    ChunkExistsError,
    ChunkInfo,
    ChunkNotFoundError,
    ChunkStorage,
    DataLogClosedError,
    DataLogCorruptionError,
    DataLogError,
    DataLogFencedError,
    DataLogFullError,
    DurableDataLog,
    LogAddress,
    StorageError,
    TierError,
)
from tiers.registry import (
    BackendConfigError,
    BackendOptionError,
    UnknownBackendError,
    available_tier1,
    available_tier2,
    load_tier1,
    load_tier2,
)

__all__ = [
    "BackendConfigError",
    "BackendOptionError",
    "BadChunkOffsetError",
    "ChunkExistsError",
    "ChunkInfo",
    "ChunkNotFoundError",
    "ChunkStorage",
    "DataLogClosedError",
    "DataLogCorruptionError",
    "DataLogError",
    "DataLogFencedError",
    "DataLogFullError",
    "DurableDataLog",
    "LogAddress",
    "StorageError",
    "TierError",
    "UnknownBackendError",
    "available_tier1",
    "available_tier2",
    "load_tier1",
    "load_tier2",
]
