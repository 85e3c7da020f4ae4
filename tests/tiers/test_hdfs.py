"""The hdfs tier-2 backend against the WebHDFS test double (``tests/tiers/webhdfs_server.py``, a
real HTTP server on 127.0.0.1; no Hadoop cluster can run here): the shared contract, directly
and by name, with appends off, fencing of a stale writer, bad options and an unreachable
namenode. The double itself is checked against Hadoop's own WebHDFS client in
``tests/spark/test_hadoop_webhdfs.py`` (it needs Spark's JVM)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tiers.webhdfs_server import WebHdfsServer, webhdfs_server
from tiers.base import BadChunkOffsetError, ChunkExistsError, ChunkStorage, StorageError
from tiers.hdfs import HDFSChunkStorage
from tiers.registry import load_tier2
from tiers.testing.contract import ChunkStorageContract


@pytest.fixture(scope="module")
def namenode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebHdfsServer]:
    with webhdfs_server(tmp_path_factory.mktemp("webhdfs")) as server:
        yield server


def _root_of(tmp_path: Path) -> str:
    """One root directory per test (the same for every instance the test makes)."""
    return "/t" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16] + "/millrace"


class TestHDFSChunkStorage(ChunkStorageContract):
    @pytest.fixture(autouse=True)
    def _server(self, namenode: WebHdfsServer) -> None:
        self.url = namenode.url

    def make_storage(self, tmp_path: Path) -> ChunkStorage:
        return HDFSChunkStorage(url=self.url, root=_root_of(tmp_path))


class TestHDFSChunkStorageByName(TestHDFSChunkStorage):
    """Through the registry, as the segment store builds it from ``MILLRACE_TIER2=hdfs``."""

    def make_storage(self, tmp_path: Path) -> ChunkStorage:
        return load_tier2("hdfs", url=self.url, root=_root_of(tmp_path), user="someone")


class TestHDFSChunkStorageWithoutAppend(TestHDFSChunkStorage):
    """A cluster with appends off: every flush a new chunk, as on S3."""

    def make_storage(self, tmp_path: Path) -> ChunkStorage:
        return HDFSChunkStorage(url=self.url, root=_root_of(tmp_path), append=False)


async def test_a_stale_writer_cannot_append_over_a_newer_one(
    namenode: WebHdfsServer, tmp_path: Path
) -> None:
    """Two instances of the tier (an old container instance and the one that took over): a
    create never overwrites, and an append at a length the chunk no longer has is refused."""
    root = _root_of(tmp_path)
    old, new = (
        HDFSChunkStorage(url=namenode.url, root=root),
        HDFSChunkStorage(url=namenode.url, root=root),
    )
    await old.create_with_data("sc/st/0.#epoch.0.E1.O0", b"old;")
    with pytest.raises(ChunkExistsError):
        await new.create_with_data("sc/st/0.#epoch.0.E1.O0", b"new;")
    await new.write("sc/st/0.#epoch.0.E1.O0", 4, b"new;")
    with pytest.raises(BadChunkOffsetError, match="has length 8, not 4"):
        await old.write("sc/st/0.#epoch.0.E1.O0", 4, b"stale;")
    assert await new.read("sc/st/0.#epoch.0.E1.O0", 0, 8) == b"old;new;"
    requests = [r for r in namenode.requests if "op=CREATE" in r or "op=APPEND" in r]
    assert any("datanode=true" in r for r in requests)  # the two-step protocol was followed
    await old.close()
    await new.close()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"url": "hdfs://namenode:9000"}, "WebHDFS address"),
        ({"url": "http://h:9870", "root": "relative"}, "absolute HDFS path"),
        ({"url": "http://h:9870", "replication": 0}, "'replication'"),
        ({"url": "http://h:9870", "append": "yes"}, "'append'"),
        ({"url": "http://h:9870", "timeout_s": -1}, "'timeout_s'"),
    ],
)
def test_bad_options_are_refused_clearly(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HDFSChunkStorage(**options)


async def test_an_unreachable_namenode_is_a_storage_error_naming_it() -> None:
    storage = HDFSChunkStorage(url="http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(StorageError, match=r"127\.0\.0\.1:9.*chunk 'c'"):
        await storage.create_with_data("c", b"x")
    await storage.close()
