"""The read index's on-disk cache: cache entries' bytes in LMDB on a local disk.

Responsibility: keep bytes by (segment id, offset) in an LMDB environment of the container's
own, within ``bytes_max``, and give them back. The read index decides what goes there (entries
it evicts from memory) and what leaves (``segment_app.engine.reading.read_index``); this class
only stores. It is a cache, not a tier: it is emptied whenever it is opened (a restart rebuilds
what it held from tier-1 and tier-2), and nothing in it is synced to disk.
"""

from __future__ import annotations

import os
import shutil
import struct

import lmdb

__all__ = ["DiskCache", "DiskCacheFullError"]

_KEY = struct.Struct(">qq")
#: LMDB's map is sized this many times the bytes kept (page overhead, freed pages in reuse).
MAP_FACTOR = 2


class DiskCacheFullError(Exception):
    """LMDB's map has no room left for a value (the caller keeps the bytes elsewhere)."""


class DiskCache:
    def __init__(self, path: str, bytes_max: int) -> None:
        if bytes_max < 1:
            raise ValueError(f"the disk cache needs a positive size, not {bytes_max}")
        shutil.rmtree(path, ignore_errors=True)  # a cache: what a last run left is not ours
        os.makedirs(path)
        self.path, self.bytes_max = path, bytes_max
        self._env = lmdb.open(
            path, map_size=bytes_max * MAP_FACTOR + (16 << 20), subdir=True, sync=False,
            metasync=False, writemap=True, readahead=False, max_dbs=0,
        )  # fmt: skip
        #: Bytes stored now (values only).
        self.bytes = 0

    def put(self, segment_id: int, offset: int, data: bytes | bytearray | memoryview) -> None:
        try:
            with self._env.begin(write=True) as txn:
                txn.put(_KEY.pack(segment_id, offset), data)
        except lmdb.MapFullError:
            raise DiskCacheFullError(f"the disk cache at {self.path} is full") from None
        self.bytes += len(data)

    def get(self, segment_id: int, offset: int) -> bytes:
        with self._env.begin(buffers=False) as txn:
            value = txn.get(_KEY.pack(segment_id, offset))
        if value is None:
            raise KeyError((segment_id, offset))
        return bytes(value)

    def delete(self, segment_id: int, offset: int, length: int) -> None:
        with self._env.begin(write=True) as txn:
            if txn.delete(_KEY.pack(segment_id, offset)):
                self.bytes -= length

    def close(self) -> None:
        self._env.close()
        shutil.rmtree(self.path, ignore_errors=True)
