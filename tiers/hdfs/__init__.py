"""The ``hdfs`` tier-2 backend: chunks as files in HDFS, over WebHDFS.

Responsibility: export ``HDFSChunkStorage`` (implemented in ``storage.py``).
"""

from tiers.hdfs.storage import HDFSChunkStorage

__all__ = ["HDFSChunkStorage"]
