"""``FileSystemChunkStorage``: tier-2 chunks as files under one root directory (local or NFS).

Responsibility: map chunk names to file paths safely and implement the tier-2 primitives with
plain file I/O: append at the current length, positional reads, in-kernel concat
(``copy_file_range``), fsync before a write returns (unless ``fsync=False``, for tests);
``write_many`` writes many chunks, then syncs them concurrently and each directory once.
A write larger than ``sync_piece_bytes`` is written and synced in pieces of that size: the disk
then never holds more than one piece of tier-2 data to flush ahead of a tier-1 fdatasync on the
same device (a 4 MiB flush written whole held the acknowledgements behind it for ~10 ms).
With option ``direct_io`` (default true), writes and reads bypass the page cache (``O_DIRECT``,
``tiers.direct_io``) where the file system allows it: the block holding the chunk's end is
rewritten with the bytes it holds, and the zeros a direct write leaves past the new end are cut
off before it returns; a read takes the blocks that hold its range into an aligned buffer. Each
page-cache page a buffered write or a cold buffered read fills costs system time (about 3 s per
GB on this project's benchmark machine, which hands freed memory back to its host); direct, the
disk does the work. Nothing of tier-2 is then in the page cache, and the segment store does not
cache what it reads from this tier either (``cache_reads`` is False: a local disk reads back
at about a GB/s, and a buffered tier-2 has the page cache); re-reads go to the disk.

Name mapping: a chunk name is split at ``/`` into directories (so one stream's chunks share a
directory); each component keeps ``[A-Za-z0-9._-#:=,+@]`` and percent-encodes every other byte of
its UTF-8 form (``%`` and ``~`` included); the file gets the suffix ``~c``, which an encoded
component can never end with, so chunk ``a`` (file ``a~c``) and chunk ``a/b`` (directory ``a``)
never collide. Empty, ``.`` and ``..`` components are rejected.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import os
import string
import threading
from collections.abc import Sequence
from typing import Any

from tiers.base import (
    BadChunkOffsetError,
    ChunkExistsError,
    ChunkNotFoundError,
    ChunkStorage,
    ChunkWrite,
    StorageError,
    _check_name,
    chunk_file_parts,
)
from tiers.direct_io import (
    BLOCK,
    DirectIOUnsupported,
    pwrite_all,
    read_direct,
    set_direct,
    write_direct,
)

__all__ = ["FileSystemChunkStorage", "chunk_path"]

_SAFE = frozenset(string.ascii_letters + string.digits + "._-#:=,+@")
#: Longest encoded component (file systems allow 255 bytes per name, the suffix needs 2; the
#: suffix is ``tiers.base.CHUNK_FILE_SUFFIX``).
_COMPONENT_BYTES_MAX = 250
#: Threads that fdatasync the files of one ``write_many`` concurrently.
SYNC_THREADS = 16
#: Default of ``sync_piece_bytes``.
SYNC_PIECE_BYTES = 1024 * 1024
#: Bytes copied per step when concat falls back to reading and writing.
_COPY_BYTES = 8 * 1024 * 1024


def chunk_path(root: str, name: str) -> str:
    """The file that holds chunk ``name`` under ``root``."""
    return os.path.join(root, *chunk_file_parts(name, _SAFE, _COMPONENT_BYTES_MAX))


class FileSystemChunkStorage(ChunkStorage):
    """Tier-2 on a directory tree: native append and concat, fsync on every change.

    Options: ``root`` (the directory holding every chunk), ``fsync`` (off only in tests),
    ``sync_piece_bytes`` (larger writes are synced piece by piece; 0: whole), ``direct_io``
    (default true: writes and reads bypass the page cache where the file system allows it).
    """

    name = "filesystem"
    supports_append = True
    supports_concat = True
    is_durable = True
    blocking = True
    cache_reads = False  # the page cache (buffered) or the local disk (direct) serves re-reads

    @classmethod
    def default_options(cls, data_dir: str) -> dict[str, Any]:
        """Chunks under ``<data dir>/tier2``."""
        return {"root": os.path.join(data_dir, "tier2")}

    def __init__(
        self,
        *,
        root: str | os.PathLike[str],
        fsync: bool = True,
        sync_piece_bytes: int = SYNC_PIECE_BYTES,
        direct_io: bool = True,
    ) -> None:
        if not isinstance(sync_piece_bytes, int) or sync_piece_bytes < 0:
            raise ValueError(f"sync_piece_bytes must be an integer >= 0, not {sync_piece_bytes!r}")
        if not isinstance(direct_io, bool):
            raise ValueError(f"option 'direct_io' must be true or false, not {direct_io!r}")
        #: Writes go direct (cleared for good once the file system or device refuses).
        self.direct_io = direct_io
        self.root = os.path.abspath(os.fspath(root))
        self.fsync = fsync
        self.sync_piece_bytes = sync_piece_bytes
        #: fsync/fdatasync calls made by this instance.
        self.fsync_count = 0
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # -- helpers -------------------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return chunk_path(self.root, name)

    def _sync(self, fd: int) -> None:
        if self.fsync:
            os.fdatasync(fd)
            self.fsync_count += 1

    def _sync_dir(self, path: str) -> None:
        if self.fsync:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
                self.fsync_count += 1
            finally:
                os.close(fd)

    def _write_synced_pieces(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        """Write ``data`` at ``offset``; with fsync on, every ``sync_piece_bytes`` but the last
        piece synced as soon as written (the caller syncs the whole at the end)."""
        piece = self.sync_piece_bytes
        if not self.fsync or not piece or len(data) <= piece:
            self._write_at(fd, data, offset)
            return
        view = memoryview(data)
        for start in range(0, len(view), piece):
            self._write_at(fd, view[start : start + piece], offset + start)
            if start + piece < len(view):
                self._sync(fd)

    def _write_at(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        """Write ``data`` at ``offset``, the end of the file ``fd`` (open for reading and
        writing): direct where allowed, the file then cut back to its new end; else buffered."""
        if self.direct_io:
            head = _pread_all(fd, offset % BLOCK, offset - offset % BLOCK)
            if set_direct(fd):
                try:
                    write_direct(fd, head, [data], offset, len(data))
                    os.ftruncate(fd, offset + len(data))
                    return
                except DirectIOUnsupported:
                    self.direct_io = False  # the device's alignment is not ours
                finally:
                    set_direct(fd, on=False)
            else:
                self.direct_io = False  # the file system refuses O_DIRECT
        pwrite_all(fd, [data], offset)

    def _open(self, name: str, flags: int) -> int:
        try:
            return os.open(self._path(name), flags)
        except FileNotFoundError:
            raise ChunkNotFoundError(f"chunk {name!r} not found") from None

    def _make_parents(self, path: str) -> None:
        """Create the directories above ``path``, durably."""
        parent = os.path.dirname(path)
        missing = []
        while not os.path.isdir(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        if not missing:
            return
        os.makedirs(missing[0], exist_ok=True)
        for created in reversed(missing):
            self._sync_dir(os.path.dirname(created))

    def _create_file(self, name: str) -> tuple[str, int]:
        path = self._path(name)
        for _ in range(3):  # a concurrent delete may remove an empty parent meanwhile
            self._make_parents(path)
            try:
                return path, os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                raise ChunkExistsError(f"chunk {name!r} exists") from None
            except FileNotFoundError:
                continue
        raise StorageError(f"chunk {name!r}: its directory keeps disappearing")

    # -- primitives ----------------------------------------------------------------------------

    def _do_create(self, name: str) -> None:
        self._do_create_with_data(name, b"")

    def _do_create_with_data(self, name: str, data: bytes | memoryview) -> None:
        path, fd = self._create_unsynced(name, data)
        try:
            self._sync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        os.close(fd)
        self._sync_dir(os.path.dirname(path))

    def _create_unsynced(self, name: str, data: bytes | memoryview) -> tuple[str, int]:
        """Create chunk ``name`` holding ``data``, not synced; its path and open fd."""
        path, fd = self._create_file(name)
        try:
            self._write_synced_pieces(fd, data, 0)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        return path, fd

    def _append_unsynced(self, name: str, offset: int, data: bytes | memoryview) -> int:
        """Append ``data`` at ``offset`` (= the chunk's length), not synced; the open fd. A
        failed write leaves the chunk as it was."""
        fd = self._open(name, os.O_RDWR)
        try:
            length = os.fstat(fd).st_size
            if length != offset:
                raise BadChunkOffsetError(
                    f"chunk {name!r}: write at {offset} but its length is {length}"
                )
            try:
                self._write_synced_pieces(fd, data, offset)
            except OSError as error:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, offset)
                raise StorageError(f"chunk {name!r}: write failed: {error}") from error
        except BaseException:
            os.close(fd)
            raise
        return fd

    async def write_many(self, writes: Sequence[ChunkWrite]) -> list[StorageError | None]:
        """The items in one worker-thread call: every item written first, then all the files
        fdatasync'ed at once from a small pool of threads (the file system commits concurrent
        syncs together), then each directory that got a new chunk fsync'ed once. Flushing
        hundreds of small segments so costs a few journal commits, not two per chunk. An item
        whose sync failed is undone (its bytes cut off, or its new chunk removed) and fails."""
        items = list(writes)
        for item in items:
            _check_name(item.name)
            if item.offset < 0 or (item.create and item.offset != 0):
                raise BadChunkOffsetError(f"chunk {item.name!r}: bad offset {item.offset}")
        outcomes: list[StorageError | None] = await self._call(self._write_batch, items)
        return outcomes

    def _write_batch(self, items: list[ChunkWrite]) -> list[StorageError | None]:
        outcomes: list[StorageError | None] = [None] * len(items)
        opened: list[tuple[int, int, str | None]] = []  # (item index, fd, path if created)
        try:
            for index, item in enumerate(items):
                try:
                    opened.append((index, *self._write_unsynced(item)))
                except StorageError as error:
                    outcomes[index] = error
                except OSError as error:
                    outcomes[index] = StorageError(f"chunk {item.name!r}: {error}")
            if self.fsync and opened:
                fds = [fd for _, fd, _ in opened]
                sync_errors = list(self._sync_pool().map(_fdatasync_error, fds))
                self.fsync_count += len(opened)
                for (index, fd, created), failure in zip(opened, sync_errors, strict=True):
                    if failure is not None:
                        outcomes[index] = self._undo(items[index], fd, created, failure)
                directories = {
                    os.path.dirname(path) for i, _, path in opened if path and not outcomes[i]
                }
                for directory in sorted(directories):
                    try:
                        self._sync_dir(directory)
                    except OSError as dir_error:
                        for index, fd, created in opened:
                            if created and os.path.dirname(created) == directory:
                                outcomes[index] = self._undo(items[index], fd, created, dir_error)
        finally:
            for _, fd, _ in opened:
                with contextlib.suppress(OSError):
                    os.close(fd)
        return outcomes

    def _write_unsynced(self, item: ChunkWrite) -> tuple[int, str | None]:
        """Write one item without syncing; returns its open fd and its path if created."""
        if item.create:
            path, fd = self._create_unsynced(item.name, item.data)
            return fd, path
        return self._append_unsynced(item.name, item.offset, item.data), None

    def _undo(
        self, item: ChunkWrite, fd: int, created: str | None, error: BaseException
    ) -> StorageError:
        """An item whose sync failed: leave the chunk as it was (best effort)."""
        with contextlib.suppress(OSError):
            if created:
                os.unlink(created)
            else:
                os.ftruncate(fd, item.offset)
        return StorageError(f"chunk {item.name!r}: sync failed: {error}")

    def _do_close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _sync_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    SYNC_THREADS, thread_name_prefix="millrace-tier2-sync"
                )
            return self._pool

    def _do_write(self, name: str, offset: int, data: bytes | memoryview) -> None:
        fd = self._append_unsynced(name, offset, data)
        try:
            try:
                self._sync(fd)
            except OSError as error:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, offset)  # leave the chunk as it was
                raise StorageError(f"chunk {name!r}: write failed: {error}") from error
        finally:
            os.close(fd)

    def _do_read(self, name: str, offset: int, length: int) -> bytes:
        fd = self._open(name, os.O_RDONLY)
        try:
            length = min(length, max(0, os.fstat(fd).st_size - offset))
            if self.direct_io and length and set_direct(fd):
                try:
                    return read_direct(fd, offset, length)
                except DirectIOUnsupported:
                    self.direct_io = False  # the device's alignment is not ours
                    set_direct(fd, on=False)
            return _pread_all(fd, length, offset)
        finally:
            os.close(fd)

    def _do_delete(self, name: str) -> None:
        path = self._path(name)
        try:
            os.unlink(path)
        except FileNotFoundError:
            raise ChunkNotFoundError(f"chunk {name!r} not found") from None
        self._remove_empty_parents(os.path.dirname(path))

    def _remove_empty_parents(self, directory: str) -> None:
        while directory != self.root and directory.startswith(self.root + os.sep):
            try:
                os.rmdir(directory)
            except OSError:
                return  # not empty (or gone): stop
            directory = os.path.dirname(directory)

    def _do_exists(self, name: str) -> bool:
        return os.path.isfile(self._path(name))

    def _do_length(self, name: str) -> int:
        try:
            return os.stat(self._path(name)).st_size
        except FileNotFoundError:
            raise ChunkNotFoundError(f"chunk {name!r} not found") from None

    def _do_concat(self, target: str, sources: list[str]) -> int:
        fds: list[int] = []
        try:
            target_fd = self._open(target, os.O_WRONLY)
            fds.append(target_fd)
            for source in sources:  # every source must exist before anything changes
                fds.append(self._open(source, os.O_RDONLY))
            start = os.fstat(target_fd).st_size
            end = start
            try:
                for source_fd in fds[1:]:
                    end = _copy_file(source_fd, target_fd, end)
                self._sync(target_fd)
            except OSError as error:
                with contextlib.suppress(OSError):
                    os.ftruncate(target_fd, start)
                raise StorageError(f"concat into chunk {target!r} failed: {error}") from error
            return end
        finally:
            for fd in fds:
                os.close(fd)


def _fdatasync_error(fd: int) -> OSError | None:
    try:
        os.fdatasync(fd)
    except OSError as error:
        return error
    return None


def _pread_all(fd: int, length: int, offset: int) -> bytes:
    data = os.pread(fd, length, offset)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _copy_file(source_fd: int, target_fd: int, position: int) -> int:
    """Append all of ``source_fd`` to ``target_fd`` at ``position``; return the new end."""
    size = os.fstat(source_fd).st_size
    copied = 0
    use_kernel = hasattr(os, "copy_file_range")
    while copied < size:
        if use_kernel:
            try:
                n = os.copy_file_range(source_fd, target_fd, size - copied, copied, position)
            except OSError as error:
                if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                use_kernel = False
                continue
        else:
            block = os.pread(source_fd, min(_COPY_BYTES, size - copied), copied)
            n = len(block)
            pwrite_all(target_fd, [block], position)
        if n == 0:
            raise StorageError(f"source chunk shrank while concatenating ({copied} of {size})")
        copied += n
        position += n
    return position
