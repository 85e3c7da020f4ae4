"""``HDFSChunkStorage``: tier-2 chunks as files in HDFS, through WebHDFS (the ``hdfs`` package).

Responsibility: map chunk names to HDFS paths under a root directory and implement the tier-2
primitives over WebHDFS's REST protocol: ``CREATE`` (never overwriting), ``APPEND``, ``OPEN``
with an offset and length, ``GETFILESTATUS``, ``DELETE``. WebHDFS needs no Hadoop libraries
or JVM on the node: it is HTTP to the namenode, which redirects data to a datanode.

Fencing, as Pravega's HDFS tier does it, with what HDFS offers: a chunk's name carries the
epoch of the container instance that made it (``segment_app.engine.writer``), a create never
overwrites (a second create of a name fails, even from another node), and before each append
the chunk's length is checked to be the offset the writer expects, so an instance that lost
its container (a newer epoch took over) cannot add to what the new one wrote; its layout
records are fenced in tier-1 besides. HDFS's single-writer lease refuses a second appender.

Appends are used where the cluster allows them (``append``, default true; false for a
cluster with appends off: every flush then makes a new chunk, as on S3). HDFS's own
``CONCAT`` is not used: it deletes its sources, while tier-2's ``concat`` leaves them, and
Millrace's merges relink chunks in the segment's layout without moving any data at all.
"""

from __future__ import annotations

import string
from typing import Any

import hdfs
import hdfs.util
import requests

from tiers.base import (
    BadChunkOffsetError,
    ChunkExistsError,
    ChunkNotFoundError,
    ChunkStorage,
    StorageError,
    chunk_file_parts,
)

__all__ = ["HDFSChunkStorage"]

#: Characters a chunk's file name keeps as they are (HDFS refuses ``:`` in a name).
_SAFE = frozenset(string.ascii_letters + string.digits + "._-#=,+@")
#: HDFS's default longest name (``dfs.namenode.fs-limits.max-component-length``), less the suffix.
_COMPONENT_BYTES_MAX = 253
_MISSING = ("FileNotFoundException",)
_EXISTS = ("FileAlreadyExistsException",)


class HDFSChunkStorage(ChunkStorage):
    """Tier-2 in HDFS over WebHDFS: appends, no native concat (see the module doc).

    Options (Pravega's ``hdfs.connect.uri`` and ``hdfs.root``, for WebHDFS): ``url`` (the
    namenode's WebHDFS address, e.g. ``http://namenode:9870``; several separated by ``;``
    for high availability), ``root`` (the directory the chunks go under, default
    ``/millrace``), ``user`` (``user.name`` on a cluster without Kerberos, default
    ``millrace``), ``replication`` (of new chunk files; default the cluster's),
    ``append`` (default true), ``timeout_s`` (per request, default 30).
    """

    name = "hdfs"
    supports_append = True
    supports_concat = False
    is_durable = True
    blocking = True

    def __new__(cls, *args: Any, append: bool = True, **options: Any) -> HDFSChunkStorage:
        """With ``append`` false, the kind without appends (``_HDFSChunkStorageNoAppend``)."""
        kind = _HDFSChunkStorageNoAppend if cls is HDFSChunkStorage and append is False else cls
        return super().__new__(kind)

    def __init__(
        self,
        *,
        url: str,
        root: str = "/millrace",
        user: str = "millrace",
        replication: int | None = None,
        append: bool = True,
        timeout_s: float = 30.0,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(
                f"the hdfs tier needs option 'url': the namenode's WebHDFS address"
                f" (http://host:9870), not {url!r}"
            )
        if not isinstance(root, str) or not root.startswith("/"):
            raise ValueError(f"option 'root' must be an absolute HDFS path, not {root!r}")
        if replication is not None and (not isinstance(replication, int) or replication < 1):
            raise ValueError(f"option 'replication' must be an integer >= 1, not {replication!r}")
        if not isinstance(append, bool):
            raise ValueError(f"option 'append' must be true or false, not {append!r}")
        if not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ValueError(f"option 'timeout_s' must be a positive number, not {timeout_s!r}")
        self.url, self.root, self.replication = url, root.rstrip("/") or "/", replication
        self._client: Any = hdfs.InsecureClient(url, user=user, timeout=timeout_s)

    def __repr__(self) -> str:
        return f"HDFSChunkStorage({self.url} {self.root})"

    def _path(self, name: str) -> str:
        """The chunk's file: components percent-encoded outside what HDFS names allow (no
        ``:``), the last with a suffix so that chunks ``a`` and ``a/b`` can both exist."""
        parts = chunk_file_parts(name, _SAFE, _COMPONENT_BYTES_MAX)
        return "/".join([self.root.rstrip("/"), *parts])

    # -- primitives ----------------------------------------------------------------------------

    def _do_create(self, name: str) -> None:
        self._do_create_with_data(name, b"")

    def _do_create_with_data(self, name: str, data: bytes | memoryview) -> None:
        path, replication = self._path(name), self.replication
        self._call_hdfs("create", name, lambda: self._client.write(
            path, data=bytes(data), overwrite=False, replication=replication))  # fmt: skip

    def _do_write(self, name: str, offset: int, data: bytes | memoryview) -> None:
        length = self._do_length(name)
        if length != offset:
            raise BadChunkOffsetError(f"chunk {name!r} has length {length}, not {offset}")
        self._call_hdfs("append to", name, lambda: self._client.write(
            self._path(name), data=bytes(data), append=True))  # fmt: skip

    def _do_read(self, name: str, offset: int, length: int) -> bytes:
        def read() -> bytes:
            with self._client.read(self._path(name), offset=offset, length=length) as reader:
                return bytes(reader.read())

        data: bytes = self._call_hdfs("read", name, read)
        return data

    def _do_delete(self, name: str) -> None:
        if not self._call_hdfs("delete", name, lambda: self._client.delete(self._path(name))):
            raise ChunkNotFoundError(f"{self!r}: chunk {name!r} not found")

    def _do_exists(self, name: str) -> bool:
        status = self._call_hdfs("look up", name, lambda: self._client.status(
            self._path(name), strict=False))  # fmt: skip
        return status is not None and status.get("type") == "FILE"

    def _do_length(self, name: str) -> int:
        status = self._call_hdfs("look up", name, lambda: self._client.status(self._path(name)))
        return int(status["length"])

    def _do_close(self) -> None:
        self._client._session.close()

    # -- errors --------------------------------------------------------------------------------

    def _call_hdfs(self, action: str, name: str, call: Any) -> Any:
        """One WebHDFS call; its errors as tier-2's, naming the chunk and the namenode."""
        try:
            return call()
        except hdfs.util.HdfsError as error:
            kind = getattr(error, "exception", None) or ""
            text = f"{self!r}: {action} chunk {name!r} failed: {kind or 'error'}: {error}"
            if kind in _MISSING:
                raise ChunkNotFoundError(text) from error
            if kind in _EXISTS:
                raise ChunkExistsError(text) from error
            raise StorageError(text) from error
        except requests.RequestException as error:
            raise StorageError(f"{self!r}: {action} chunk {name!r} failed: {error}") from error


class _HDFSChunkStorageNoAppend(HDFSChunkStorage):
    """``HDFSChunkStorage`` with option ``append`` false: a cluster that does not allow
    appends; every flush makes a new chunk."""

    supports_append = False
