"""A WebHDFS server for tests. A TEST DOUBLE of an HDFS cluster, not HDFS.

No Hadoop cluster can run on this machine, so the ``hdfs`` tier's tests talk to this server,
which speaks the WebHDFS REST protocol as Hadoop documents it
(``hadoop-project-dist/hadoop-hdfs/WebHDFS.html``) for the operations the tier and Hadoop's own
client use: ``CREATE`` and ``APPEND`` in two steps (the "namenode" answers ``307`` with a
"datanode" ``Location``; the data goes there), ``OPEN`` with ``offset`` and ``length`` (also
redirected), ``GETFILESTATUS``, ``LISTSTATUS``, ``MKDIRS``, ``RENAME``, ``DELETE``,
``CONCAT``, ``TRUNCATE`` and ``GETHOMEDIRECTORY``. Errors are ``RemoteException`` JSON with
the status HDFS gives (404 ``FileNotFoundException``, 403 ``FileAlreadyExistsException``, 400
``IllegalArgumentException`` …). Bodies may come with ``Content-Length`` or chunked.

``json_content_type=False`` leaves the ``Content-Type`` header off JSON answers (the bodies
are the same): Hadoop's client checks that header with a (shaded) Jersey runtime that the
Hadoop jars inside pyspark do not carry, so the check against that client needs it off.

Files are kept in a local directory. Nothing of HDFS's inside is imitated: no blocks, replicas,
leases, permissions or users (``user.name`` is accepted and ignored). How faithful the protocol
is, is checked by pointing Hadoop's own WebHDFS client at it
(``tests/tiers/test_hdfs.py::test_hadoops_own_webhdfs_client_agrees``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PREFIX = "/webhdfs/v1"


class WebHdfsError(Exception):
    def __init__(self, status: int, exception: str, java_class: str, message: str) -> None:
        super().__init__(message)
        self.status, self.exception, self.java_class = status, exception, java_class


def _not_found(path: str) -> WebHdfsError:
    return WebHdfsError(404, "FileNotFoundException", "java.io.FileNotFoundException",
                        f"File does not exist: {path}")  # fmt: skip


def _exists(path: str) -> WebHdfsError:
    return WebHdfsError(403, "FileAlreadyExistsException",
                        "org.apache.hadoop.fs.FileAlreadyExistsException",
                        f"{path} already exists")  # fmt: skip


def _illegal(message: str) -> WebHdfsError:
    return WebHdfsError(400, "IllegalArgumentException", "java.lang.IllegalArgumentException",
                        message)  # fmt: skip


class _Handler(BaseHTTPRequestHandler):
    server: WebHdfsServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        self.server.requests.append(f"{self.command} {self.path}")

    # -- plumbing ----------------------------------------------------------------------------

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              kind: str = "application/json") -> None:  # fmt: skip
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if kind != "application/json" or self.server.json_content_type:
            self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _json(self, value: Any, status: int = 200) -> None:
        self._send(status, json.dumps(value).encode())

    def _handle(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = {k.lower(): v for k, v in urllib.parse.parse_qsl(url.query, keep_blank_values=True)}
        body = self._body()  # always read, so the connection can be kept
        try:
            if not url.path.startswith(PREFIX):
                raise _illegal(f"not a WebHDFS path: {url.path}")
            path = urllib.parse.unquote(url.path[len(PREFIX) :]) or "/"
            op = query.get("op", "").upper()
            handler = getattr(self, f"op_{self.command}_{op}", None)
            if handler is None:
                what = f"{op or 'no op'} by {self.command} is not supported"
                raise WebHdfsError(400, "UnsupportedOperationException",
                                   "java.lang.UnsupportedOperationException", what)  # fmt: skip
            handler(path, query, body)
        except WebHdfsError as exc:
            remote = {"exception": exc.exception, "javaClassName": exc.java_class,
                      "message": str(exc)}  # fmt: skip
            self._json({"RemoteException": remote}, exc.status)

    do_GET = do_PUT = do_POST = do_DELETE = _handle

    def _redirect(self, query: dict[str, str]) -> None:
        """The namenode's answer to CREATE, APPEND and OPEN: go to the datanode."""
        moved = {**query, "datanode": "true"}
        where = f"http://{self.server.address}{urllib.parse.urlsplit(self.path).path}"
        self._send(307, headers={"Location": f"{where}?{urllib.parse.urlencode(moved)}"})

    # -- operations --------------------------------------------------------------------------

    def op_PUT_CREATE(self, path: str, query: dict[str, str], body: bytes) -> None:
        files = self.server
        with files.lock:
            if files.is_dir(path) or (files.is_file(path) and query.get("overwrite") != "true"):
                raise _exists(path)
        if query.get("datanode") != "true":
            return self._redirect(query)
        with files.lock:
            if files.is_file(path) and query.get("overwrite") != "true":
                raise _exists(path)
            local = files.local(path)
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(body)
        self._send(201, headers={"Location": f"hdfs://{files.address}{path}"})

    def op_POST_APPEND(self, path: str, query: dict[str, str], body: bytes) -> None:
        files = self.server
        if not files.is_file(path):
            raise _not_found(path)
        if query.get("datanode") != "true":
            return self._redirect(query)
        with files.lock, files.local(path).open("ab") as out:
            out.write(body)
        self._send(200)

    def op_GET_OPEN(self, path: str, query: dict[str, str], body: bytes) -> None:
        files = self.server
        if not files.is_file(path):
            raise _not_found(path)
        if query.get("datanode") != "true":
            return self._redirect(query)
        offset = int(query.get("offset") or 0)
        with files.local(path).open("rb") as source:
            size = os.fstat(source.fileno()).st_size
            if offset < 0 or offset > size:
                raise WebHdfsError(403, "IOException", "java.io.IOException",
                                   f"Offset={offset} out of the range [0, {size}]")  # fmt: skip
            source.seek(offset)
            wanted = query.get("length")
            data = source.read() if wanted in (None, "") else source.read(int(wanted))
        self._send(200, data, kind="application/octet-stream")

    def op_GET_GETFILESTATUS(self, path: str, query: dict[str, str], body: bytes) -> None:
        self._json({"FileStatus": self.server.status(path, suffix="")})

    def op_GET_LISTSTATUS(self, path: str, query: dict[str, str], body: bytes) -> None:
        files = self.server
        if files.is_file(path):
            found = [files.status(path, suffix="")]
        elif files.is_dir(path):
            names = sorted(os.listdir(files.local(path)))
            found = [files.status(f"{path.rstrip('/')}/{n}", suffix=n) for n in names]
        else:
            raise _not_found(path)
        self._json({"FileStatuses": {"FileStatus": found}})

    def op_GET_GETHOMEDIRECTORY(self, path: str, query: dict[str, str], body: bytes) -> None:
        self._json({"Path": f"/user/{query.get('user.name') or 'webuser'}"})

    def op_PUT_MKDIRS(self, path: str, query: dict[str, str], body: bytes) -> None:
        files = self.server
        with files.lock:
            if files.is_file(path):
                raise _exists(path)
            files.local(path).mkdir(parents=True, exist_ok=True)
        self._json({"boolean": True})

    def op_PUT_RENAME(self, path: str, query: dict[str, str], body: bytes) -> None:
        files = self.server
        target = query.get("destination") or ""
        if not target.startswith("/"):
            raise _illegal(f'Invalid value for webhdfs parameter "destination": {target}')
        with files.lock:
            if not files.exists(path) or files.exists(target):
                return self._json({"boolean": False})
            files.local(target).parent.mkdir(parents=True, exist_ok=True)
            os.rename(files.local(path), files.local(target))
        self._json({"boolean": True})

    def op_DELETE_DELETE(self, path: str, query: dict[str, str], body: bytes) -> None:
        files = self.server
        with files.lock:
            local = files.local(path)
            if files.is_file(path):
                local.unlink()
            elif files.is_dir(path):
                if any(local.iterdir()) and query.get("recursive") != "true":
                    raise WebHdfsError(403, "PathIsNotEmptyDirectoryException",
                                       "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException",
                                       f"{path} is non empty': Directory is not empty")  # fmt: skip
                shutil.rmtree(local)
            else:
                return self._json({"boolean": False})
        self._json({"boolean": True})

    def op_POST_CONCAT(self, path: str, query: dict[str, str], body: bytes) -> None:
        """HDFS's concat: the sources' bytes go to the end of the target, in order, and the
        sources are gone."""
        files = self.server
        sources = [s for s in (query.get("sources") or "").split(",") if s]
        if not sources:
            raise _illegal('Invalid value for webhdfs parameter "sources": empty')
        with files.lock:
            for name in (path, *sources):
                if not files.is_file(name):
                    raise _not_found(name)
            if path in sources or len(set(sources)) != len(sources):
                raise _illegal(f"concat: the target {path} or a source is given twice")
            with files.local(path).open("ab") as out:
                for source in sources:
                    out.write(files.local(source).read_bytes())
            for source in sources:
                files.local(source).unlink()
        self._send(200)

    def op_POST_TRUNCATE(self, path: str, query: dict[str, str], body: bytes) -> None:
        files = self.server
        length = int(query.get("newlength") or -1)
        with files.lock:
            if not files.is_file(path):
                raise _not_found(path)
            local = files.local(path)
            if not 0 <= length <= local.stat().st_size:
                raise WebHdfsError(403, "HadoopIllegalArgumentException",
                                   "org.apache.hadoop.HadoopIllegalArgumentException",
                                   f"Cannot truncate to a larger file size: {length}")  # fmt: skip
            os.truncate(local, length)
        self._json({"boolean": True})


class WebHdfsServer(ThreadingHTTPServer):
    """The server; its files under ``root``. ``url`` is what a WebHDFS client is given."""

    daemon_threads = True

    def __init__(self, root: Path, json_content_type: bool = True) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.json_content_type = json_content_type
        self.lock = threading.RLock()
        self.requests: list[str] = []  # "METHOD /path?query", in the order served
        self.address = f"127.0.0.1:{self.server_address[1]}"
        self.url = f"http://{self.address}"

    def local(self, path: str) -> Path:
        parts = [p for p in path.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise _illegal(f"Invalid path name {path}")
        return self.root.joinpath(*parts)

    def is_file(self, path: str) -> bool:
        return self.local(path).is_file()

    def is_dir(self, path: str) -> bool:
        return self.local(path).is_dir()

    def exists(self, path: str) -> bool:
        return self.local(path).exists()

    def status(self, path: str, suffix: str) -> dict[str, Any]:
        local = self.local(path)
        try:
            info = local.stat()
        except FileNotFoundError:
            raise _not_found(path) from None
        directory = local.is_dir()
        return {
            "accessTime": int(info.st_atime * 1000), "blockSize": 0 if directory else 134217728,
            "childrenNum": len(os.listdir(local)) if directory else 0, "fileId": info.st_ino,
            "group": "supergroup", "length": 0 if directory else info.st_size,
            "modificationTime": int(info.st_mtime * 1000), "owner": "millrace",
            "pathSuffix": suffix, "permission": "755" if directory else "644",
            "replication": 0 if directory else 1, "storagePolicy": 0,
            "type": "DIRECTORY" if directory else "FILE",
        }  # fmt: skip


@contextlib.contextmanager
def webhdfs_server(root: Path, json_content_type: bool = True) -> Iterator[WebHdfsServer]:
    """The test double serving ``root`` on a free port of 127.0.0.1 until the block ends."""
    root.mkdir(parents=True, exist_ok=True)
    server = WebHdfsServer(root, json_content_type)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name="webhdfs-test-double", daemon=True)  # fmt: skip
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


if __name__ == "__main__":  # python -m tests.tiers.webhdfs_server DIR: serve DIR until killed
    import sys

    with webhdfs_server(Path(sys.argv[1])) as running:
        print(f"WebHDFS test double at {running.url}, files in {sys.argv[1]}", flush=True)
        while True:
            time.sleep(3600)
