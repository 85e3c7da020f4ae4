"""Every in-tree tier backend passes the shared contract suite (``tiers.testing.contract``)."""

from __future__ import annotations

from pathlib import Path

from tiers.base import ChunkStorage, DurableDataLog
from tiers.file import FileDurableDataLog
from tiers.filesystem import FileSystemChunkStorage
from tiers.memory import (
    MemoryChunkStorage,
    MemoryChunkStore,
    MemoryDurableDataLog,
    MemoryLogStore,
    MemoryObjectChunkStorage,
)
from tiers.registry import load_tier1, load_tier2
from tiers.testing.contract import ChunkStorageContract, DurableDataLogContract


class TestMemoryDurableDataLog(DurableDataLogContract):
    def setup_method(self) -> None:
        self.stores: dict[tuple[Path, str], MemoryLogStore] = {}

    def make_log(self, tmp_path: Path, log_id: str) -> DurableDataLog:
        store = self.stores.setdefault((tmp_path, log_id), MemoryLogStore())
        return MemoryDurableDataLog(store=store)


class TestMemoryDurableDataLogByName(DurableDataLogContract):
    """The process-global stores, reached through the registry as the engine would."""

    def make_log(self, tmp_path: Path, log_id: str) -> DurableDataLog:
        return load_tier1("memory", log_id=f"{tmp_path}/{log_id}")


class TestFileDurableDataLog(DurableDataLogContract):
    def make_log(self, tmp_path: Path, log_id: str) -> DurableDataLog:
        return FileDurableDataLog(path=tmp_path / log_id)


class TestFileDurableDataLogSmallLedgers(DurableDataLogContract):
    """Rolling to new ledger files every few KiB exercises ledger boundaries everywhere."""

    def make_log(self, tmp_path: Path, log_id: str) -> DurableDataLog:
        return load_tier1("file", path=tmp_path / log_id, fsync=False, ledger_bytes_max=4096)


class TestMemoryChunkStorage(ChunkStorageContract):
    def setup_method(self) -> None:
        self.stores: dict[Path, MemoryChunkStore] = {}

    def make_storage(self, tmp_path: Path) -> ChunkStorage:
        return MemoryChunkStorage(store=self.stores.setdefault(tmp_path, MemoryChunkStore()))


class TestMemoryObjectChunkStorage(ChunkStorageContract):
    def make_storage(self, tmp_path: Path) -> ChunkStorage:
        return MemoryObjectChunkStorage(store_id=str(tmp_path))


class TestFileSystemChunkStorage(ChunkStorageContract):
    def make_storage(self, tmp_path: Path) -> ChunkStorage:
        return FileSystemChunkStorage(root=tmp_path / "tier2")


class TestFileSystemChunkStorageByName(ChunkStorageContract):
    def make_storage(self, tmp_path: Path) -> ChunkStorage:
        return load_tier2("filesystem", root=str(tmp_path / "tier2"), fsync=False)
