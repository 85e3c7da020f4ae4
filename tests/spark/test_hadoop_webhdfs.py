"""The WebHDFS test double (``tests/tiers/webhdfs_server.py``) checked against Hadoop's own
WebHDFS client: ``WebHdfsFileSystem`` from the Hadoop jars inside pyspark, driven through the
test session's Spark JVM. Here because it needs that JVM (``tests/spark/conftest.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tiers.webhdfs_server import WebHdfsServer, webhdfs_server
from tiers.hdfs import HDFSChunkStorage

pytestmark = pytest.mark.slow


@pytest.fixture
def namenode(tmp_path: Path) -> Iterator[WebHdfsServer]:
    # JSON answers without Content-Type: checking it needs a Jersey runtime pyspark's Hadoop
    # jars lack (see the double's docstring); the bodies are the same
    with webhdfs_server(tmp_path / "webhdfs", json_content_type=False) as server:
        yield server


def test_hadoops_own_webhdfs_client_agrees(namenode: WebHdfsServer, spark: Any) -> None:
    """The test double's faithfulness: Hadoop's WebHDFS client (``WebHdfsFileSystem``, from the
    Hadoop jars inside pyspark, driven through Spark's JVM) does against it each operation the
    tier relies on, and more, and sees what it should; what it wrote, the tier reads."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    uri = jvm.java.net.URI(f"webhdfs://{namenode.address}")
    fs = jvm.org.apache.hadoop.fs.FileSystem.newInstance(uri, conf)
    path = jvm.org.apache.hadoop.fs.Path

    def write(name: str, data: bytes, append: bool = False) -> None:
        out = fs.append(path(name)) if append else fs.create(path(name), False)
        out.write(bytearray(data))
        out.close()

    def read(name: str, offset: int, length: int) -> bytes:
        stream = fs.open(path(name))
        try:
            stream.seek(offset)  # then Hadoop's OPEN carries the offset
            return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream, length))
        finally:
            stream.close()

    try:
        write("/hadoop/a/file", b"hello ")
        write("/hadoop/a/file", b"world", append=True)
        status = fs.getFileStatus(path("/hadoop/a/file"))
        assert (status.getLen(), status.isFile()) == (11, True)
        assert read("/hadoop/a/file", 6, 5) == b"world"
        with pytest.raises(Exception, match=r"FileAlreadyExists|already exists"):
            write("/hadoop/a/file", b"again")
        assert [s.getPath().getName() for s in fs.listStatus(path("/hadoop/a"))] == ["file"]
        write("/hadoop/a/second", b"+two")
        sources = spark.sparkContext._gateway.new_array(jvm.org.apache.hadoop.fs.Path, 1)
        sources[0] = path("/hadoop/a/second")
        fs.concat(path("/hadoop/a/file"), sources)
        assert read("/hadoop/a/file", 0, 15) == b"hello world+two"
        assert not fs.exists(path("/hadoop/a/second"))  # HDFS's concat consumes its sources
        assert fs.truncate(path("/hadoop/a/file"), 11)
        assert fs.getFileStatus(path("/hadoop/a/file")).getLen() == 11
        assert fs.rename(path("/hadoop/a/file"), path("/hadoop/b/moved~c"))
        assert not fs.exists(path("/hadoop/a/file"))
        assert not fs.rename(path("/hadoop/a/file"), path("/hadoop/x"))  # no source: false
        assert fs.mkdirs(path("/hadoop/c/d"))
        assert fs.getFileStatus(path("/hadoop/c/d")).isDirectory()
        with pytest.raises(Exception, match=r"FileNotFound|does not exist"):
            fs.getFileStatus(path("/hadoop/nothing"))
        # what Hadoop's client wrote, the tier reads, and the other way round (a chunk's file
        # has the suffix ~c: HDFSChunkStorage._path)
        tier = HDFSChunkStorage(url=namenode.url, root="/hadoop")
        assert asyncio.run(tier.read("b/moved", 0, 11)) == b"hello world"
        asyncio.run(tier.create_with_data("from-tier", b"written by the tier"))
        assert read("/hadoop/from-tier~c", 11, 8) == b"the tier"
        assert fs.delete(path("/hadoop"), True)
        assert not fs.exists(path("/hadoop/b/moved~c"))
    finally:
        fs.close()
