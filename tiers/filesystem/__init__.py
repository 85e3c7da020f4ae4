"""The ``filesystem`` tier-2 backend: chunks as files under a root directory (local or NFS).

Responsibility: export ``FileSystemChunkStorage`` (implemented in ``storage.py``).
"""

from tiers.filesystem.storage import FileSystemChunkStorage, chunk_path

__all__ = ["FileSystemChunkStorage", "chunk_path"]
