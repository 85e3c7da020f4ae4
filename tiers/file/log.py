"""``FileDurableDataLog``: tier-1 on local files, with fdatasync group commit and epoch fencing.

Responsibility: one container's write-ahead log in one directory (formats in ``format.py``).
Each epoch writes its own ledger files; the manifest lists them with the length at which each
was sealed; the ``epoch`` file is the fence.

Why fencing is safe: ``open(epoch)`` (under an exclusive ``flock``) first stores the new epoch
durably, *then* finds the valid end of the ledger the previous owner was writing, fsyncs it and
seals it there in the manifest, and only then starts its own ledger. A writer acknowledges a batch
only if, after its write and fdatasync, the epoch file still holds its epoch. So any batch it
acknowledged was on disk before the new epoch was stored, hence before the seal was measured,
hence inside the sealed length; anything it writes after the new owner opened lies past the seal
and is never read. It also checks the epoch before each write, so a writer that was fenced while
idle (stopped, say) writes nothing more at all; only a write already under way can land past the
seal. Manifest changes by an old owner (roll, truncate) happen under the same lock
after checking the epoch, so they cannot interleave with a takeover.

Group commit: the base queues frames while a write is in flight and hands them over together;
one write and one ``fdatasync`` cover the whole batch. The write bypasses the page cache
(``O_DIRECT``) where the file system allows it (``direct.py``; option ``direct_io``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, TypeVarTuple, Unpack

from millrace.kernel import defaults
from tiers.base import (
    DataLogClosedError,
    DataLogCorruptionError,
    DataLogError,
    DataLogFencedError,
    DurableDataLog,
    Frame,
    LogAddress,
)
from tiers.file import format as fmt
from tiers.file.direct import LedgerAppender
from tiers.file.read import Cursor, LedgerReader, check_header
from tiers.file.scan import find_valid_end
from tiers.file.thread import SerialThread

__all__ = ["FileDurableDataLog"]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

_LEDGER_FILE = re.compile(r"ledger-(\d+)\.log")


class FileDurableDataLog(DurableDataLog):
    """Tier-1 on local files: durable on return of ``append`` (fdatasync), fenced by epoch.

    Options: ``path`` (this log's directory, one per container), ``root`` (a directory that
    holds every container's log, ``<root>/<log id>``, in place of ``<data dir>/tier1``: one
    several nodes of a host share, so that a container that moves finds its log; the file
    tier-1 is never shared across hosts), ``fsync`` (off only in tests:
    nothing is synced then), ``ledger_bytes_max`` (start a new ledger file past this size),
    ``read_batch_bytes_max`` / ``read_batch_frames_max`` (bounds of one ``read_all`` step),
    ``frame_bytes_max``, ``batch_frames_max``, ``direct_io`` (default true: ledger writes bypass
    the page cache where the file system allows it; false: buffered writes).

    TEST-ONLY options (the acceptance tests, docs/components/guarantees.md): ``fencing=False``
    skips the epoch check after a write (a fenced instance keeps acknowledging),
    ``verify_crc=False`` skips record CRC checks (corrupt bytes are read), ``sync_trace=True``
    appends ``<ledger file> <length>`` to ``<path>/sync-trace`` after each fdatasync of a ledger,
    before the batch is acknowledged (what the power-loss test cuts ledgers back to).
    """

    name = "file"
    is_durable = True
    supports_fencing = True
    blocking = True
    accepts_frame_parts = True  # (written from where they are: see format.encode_records)
    appends_inline = True  # a lone frame: one pwrite and one fdatasync on the caller's thread

    @classmethod
    def default_options(cls, data_dir: str, log_id: str) -> dict[str, Any]:
        """Each container's log in its own directory, ``<data dir>/tier1/<log id>``."""
        return {"path": os.path.join(data_dir, "tier1", log_id)}

    def __init__(
        self,
        *,
        path: str | os.PathLike[str],
        root: str | os.PathLike[str] | None = None,
        fsync: bool = True,
        ledger_bytes_max: int = 256 * 1024 * 1024,
        read_batch_bytes_max: int = 16 * 1024 * 1024,
        read_batch_frames_max: int = 1024,
        frame_bytes_max: int = defaults.FRAME_BYTES_MAX,
        batch_frames_max: int = 256,
        fencing: bool = True,
        verify_crc: bool = True,
        sync_trace: bool = False,
        direct_io: bool = True,
    ) -> None:
        super().__init__(frame_bytes_max=frame_bytes_max, batch_frames_max=batch_frames_max)
        if ledger_bytes_max < fmt.LEDGER_HEADER_SIZE:
            raise ValueError("ledger_bytes_max is too small")
        if not isinstance(direct_io, bool):
            raise ValueError(f"option 'direct_io' must be true or false, not {direct_io!r}")
        self.direct_io = direct_io
        self.path = os.fspath(path)
        if root is not None:  # the same log id, under the shared root
            self.path = os.path.join(os.fspath(root), os.path.basename(self.path.rstrip("/")))
        self.fsync = fsync
        self.ledger_bytes_max = ledger_bytes_max
        self.fencing = fencing  # test-only switch (see the class doc)
        self.verify_crc = verify_crc  # test-only switch
        self.sync_trace = sync_trace  # test-only switch
        #: fsync/fdatasync calls made by this instance (tests check ``fsync=False`` with it).
        self.fsync_count = 0
        self._lock = threading.Lock()  # guards the state below against concurrent primitives
        self._epoch_fd: int | None = None
        self._appender: LedgerAppender | None = None  # the current ledger's file and writes
        self._owned_epoch = -1
        self._manifest = fmt.Manifest()
        self._write_offset = 0  # end of the last acknowledged batch in the current ledger
        self._next_sequence = 1
        self._fenced = False
        self._broken: BaseException | None = None
        self._reader = LedgerReader(read_batch_frames_max, read_batch_bytes_max, verify_crc)
        self._writer_thread = SerialThread(f"millrace-file-log:{self.path}")

    async def _call(self, fn: Callable[[Unpack[_Ts]], _T], *args: *_Ts) -> _T:
        if getattr(fn, "__func__", None) is FileDurableDataLog._do_append_batch:
            result: _T = await self._writer_thread.submit(fn, *args, merge=True)
            return result
        return await super()._call(fn, *args)

    # -- paths and small helpers ---------------------------------------------------------------

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def _ledger_path(self, ledger_id: int) -> str:
        return self._file(fmt.ledger_file_name(ledger_id))

    def _sync(self, fd: int, *, data_only: bool = True) -> None:
        if self.fsync:
            (os.fdatasync if data_only else os.fsync)(fd)
            self.fsync_count += 1

    def _trace_synced(self, ledger_id: int, length: int) -> None:
        """TEST-ONLY: record that ``length`` bytes of the ledger are durable (``sync_trace``)."""
        if not (self.sync_trace and self.fsync):
            return
        line = f"{fmt.ledger_file_name(ledger_id)} {length}\n".encode()
        fd = os.open(self._file("sync-trace"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def _sync_dir(self, path: str | None = None) -> None:
        if self.fsync:
            fd = os.open(path or self.path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
                self.fsync_count += 1
            finally:
                os.close(fd)

    def _epoch_file(self) -> int:
        if self._epoch_fd is None:
            raise DataLogClosedError(f"{self.path}: log is not open")
        return self._epoch_fd

    def _ledger(self) -> LedgerAppender:
        if self._appender is None:
            raise DataLogClosedError(f"{self.path}: log is not open")
        return self._appender

    def _ledger_file(self) -> int:
        return self._ledger().fd

    @contextlib.contextmanager
    def _flocked(self) -> Iterator[int]:
        """Hold the cross-process lock (an exclusive ``flock`` of the epoch file)."""
        fd = self._epoch_file()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _check_usable(self) -> None:
        if self._fenced:
            raise DataLogFencedError(f"{self.path}: fenced by a higher epoch")
        if self._broken is not None:
            raise DataLogError(
                f"{self.path}: unusable after {self._broken!r}; reopen with a higher epoch"
            )
        self._ledger_file()

    def _check_fence(self) -> None:
        """Raise ``DataLogFencedError`` if the epoch file no longer holds our epoch."""
        stored = fmt.decode_epoch(os.pread(self._epoch_file(), fmt.EPOCH_SIZE, 0), self.path)
        if stored != self._owned_epoch:
            self._fenced = True
            raise DataLogFencedError(
                f"{self.path}: fenced: epoch file holds {stored}, this instance has "
                f"{self._owned_epoch}"
            )

    def _write_manifest(self, manifest: fmt.Manifest) -> None:
        tmp = self._file("manifest.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            data = fmt.encode_manifest(manifest)
            if os.write(fd, data) != len(data):
                raise DataLogError(f"{tmp}: short write")
            self._sync(fd, data_only=False)
        finally:
            os.close(fd)
        os.replace(tmp, self._file("manifest"))
        self._sync_dir()
        self._manifest = manifest

    def _read_manifest(self) -> fmt.Manifest:
        path = self._file("manifest")
        try:
            with open(path, "rb") as file:
                return fmt.decode_manifest(file.read(), path)
        except FileNotFoundError:
            return fmt.Manifest()

    # -- open: take over and fence -------------------------------------------------------------

    def _do_check_fenced(self) -> None:
        if self.fencing:  # False only in tests
            self._check_fence()

    def _do_current_epoch(self) -> int:
        path = self._file("epoch")
        try:
            with open(path, "rb") as file:
                stored = fmt.decode_epoch(file.read(fmt.EPOCH_SIZE), path)
        except FileNotFoundError:
            stored = -1
        return max(stored, self._read_manifest().epoch, 0)

    def _do_open(self, epoch: int) -> None:
        self._close_files()
        if not os.path.isdir(self.path):
            os.makedirs(self.path, exist_ok=True)
            self._sync_dir(os.path.dirname(os.path.abspath(self.path)))
        self._epoch_fd = os.open(self._file("epoch"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            with self._lock, self._flocked():
                self._take_over(epoch)
        except BaseException:
            self._close_files()
            raise

    def _take_over(self, epoch: int) -> None:
        epoch_fd = self._epoch_file()
        stored = fmt.decode_epoch(os.pread(epoch_fd, fmt.EPOCH_SIZE, 0), self.path)
        manifest = self._read_manifest()
        current = max(stored, manifest.epoch)
        if epoch <= current:
            raise DataLogFencedError(f"{self.path}: cannot open with epoch {epoch} <= {current}")
        # 1. The fence goes up first (see the module doc for why this order is what makes it safe).
        os.pwrite(epoch_fd, fmt.encode_epoch(epoch), 0)
        self._sync(epoch_fd)
        if stored < 0:
            self._sync_dir()
        # 2. Seal what earlier epochs wrote, at its valid end.
        ledgers, next_sequence = self._seal_ledgers(manifest.ledgers)
        self._remove_orphans({entry.id for entry in ledgers})
        # 3. Start this epoch's ledger.
        ledger_id = max((entry.id for entry in ledgers), default=0) + 1
        entry = fmt.LedgerEntry(ledger_id, epoch, next_sequence)
        appender = self._create_ledger(entry)
        try:
            manifest = fmt.Manifest(epoch, (*ledgers, entry), manifest.truncation)
            self._write_manifest(manifest)
        except BaseException:
            os.close(appender.fd)
            raise
        self._appender = appender
        self._owned_epoch = epoch
        self._write_offset = fmt.LEDGER_HEADER_SIZE
        self._next_sequence = next_sequence
        self._fenced = False
        self._broken = None

    def _seal_ledgers(
        self, ledgers: tuple[fmt.LedgerEntry, ...]
    ) -> tuple[tuple[fmt.LedgerEntry, ...], int]:
        """Seal every unsealed ledger at its valid end; return them and the next sequence."""
        sealed = []
        next_sequence = 1
        for entry in ledgers:
            if entry.sealed_length is None:
                entry = self._seal(entry)
            if entry.end_sequence is None:
                raise DataLogCorruptionError(
                    f"{self._file('manifest')}: sealed ledger {entry.id} has no end sequence"
                )
            sealed.append(entry)
            next_sequence = entry.end_sequence
        return tuple(sealed), next_sequence

    def _seal(self, entry: fmt.LedgerEntry) -> fmt.LedgerEntry:
        path = self._ledger_path(entry.id)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise DataLogCorruptionError(f"{path}: listed in the manifest but missing") from None
        try:
            check_header(fd, path, entry)
            end, next_sequence = find_valid_end(
                fd, path, fmt.LEDGER_HEADER_SIZE, entry.first_sequence, verify_crc=self.verify_crc
            )
            self._sync(fd)  # what the old owner wrote up to ``end`` must not vanish in a crash
            self._trace_synced(entry.id, end)
        finally:
            os.close(fd)
        return entry.sealed(end, next_sequence)

    def _remove_orphans(self, listed: set[int]) -> None:
        """Delete ledger files the manifest does not list (left by a crash or a truncation)."""
        for name in os.listdir(self.path):
            match = _LEDGER_FILE.fullmatch(name)
            if match and int(match.group(1)) not in listed:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._file(name))

    def _create_ledger(self, entry: fmt.LedgerEntry) -> LedgerAppender:
        """Create the ledger file ``entry`` with its header, durably; what appends to it."""
        path = self._ledger_path(entry.id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            header = fmt.encode_ledger_header(
                fmt.LedgerHeader(entry.epoch, entry.id, entry.first_sequence)
            )
            os.pwrite(fd, header, 0)
            self._sync(fd)
            self._trace_synced(entry.id, fmt.LEDGER_HEADER_SIZE)
            self._sync_dir()
        except BaseException:
            os.close(fd)
            raise
        return LedgerAppender(fd, header, direct=self.direct_io)

    # -- append ----------------------------------------------------------------------------

    def _do_append_batch(self, frames: Sequence[Frame]) -> list[LogAddress]:
        self._check_usable()
        if self._write_offset >= self.ledger_bytes_max:
            self._roll()
        appender = self._ledger()
        ledger = self._manifest.ledgers[-1].id
        offset = self._write_offset
        sequence = self._next_sequence
        buffers, addresses, size = fmt.encode_records(frames, sequence, ledger, offset)
        if appender.end != offset:
            raise DataLogError(f"{self._ledger_path(ledger)}: the appender is not at {offset}")
        if self.fencing:
            self._check_fence()  # fenced already: write nothing more (see the module doc)
        try:
            appender.write(buffers, size)
            self._sync(appender.fd)
            self._trace_synced(ledger, offset + size)
        except OSError as error:
            self._abandon_ledger(error)
            raise DataLogError(f"{self._ledger_path(ledger)}: write failed: {error}") from error
        if self.fencing:  # False only in tests (proves the fencing test can fail)
            self._check_fence()  # after the data is durable: see the module doc
        with self._lock:
            self._write_offset = offset + size
            self._next_sequence = sequence + len(frames)
        return addresses

    def _roll(self) -> None:
        """Seal the current ledger at its acknowledged end and continue in a new one."""
        with self._lock, self._flocked():
            self._check_fence()
            self._roll_locked()

    def _roll_locked(self) -> None:
        manifest = self._manifest
        current = manifest.ledgers[-1].sealed(self._write_offset, self._next_sequence)
        entry = fmt.LedgerEntry(current.id + 1, self._owned_epoch, self._next_sequence)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._ledger_path(entry.id))  # a leftover of a failed roll
        appender = self._create_ledger(entry)
        try:
            ledgers = (*manifest.ledgers[:-1], current, entry)
            self._write_manifest(dataclasses.replace(manifest, ledgers=ledgers))
        except BaseException as error:
            # The new manifest may or may not be on disk: writing either ledger could now
            # lose acknowledged data, so this instance stops here.
            os.close(appender.fd)
            self._broken = error
            raise
        os.close(self._ledger_file())
        self._appender = appender
        self._write_offset = fmt.LEDGER_HEADER_SIZE

    def _abandon_ledger(self, error: OSError) -> None:
        """After a failed write, keep its bytes from ever being read, then stop this instance.

        The ledger is sealed in the manifest at the last acknowledged end (and the failed bytes
        cut off, best effort), but only while this instance provably still owns the log (lock
        held, epoch checked): a new owner may have sealed it at a length that includes those
        bytes. The base refuses further work after a failure in any case (failures are sticky).
        """
        self._broken = error
        with self._lock, self._flocked():
            self._check_fence()
            with contextlib.suppress(OSError):
                os.ftruncate(self._ledger_file(), self._write_offset)
            manifest = self._manifest
            current = manifest.ledgers[-1].sealed(self._write_offset, self._next_sequence)
            ledgers = (*manifest.ledgers[:-1], current)
            with contextlib.suppress(OSError):  # if this fails, the next owner's scan decides
                self._write_manifest(dataclasses.replace(manifest, ledgers=ledgers))

    # -- read ------------------------------------------------------------------------------

    def _do_read_batch(self, cursor: object) -> tuple[list[tuple[LogAddress, bytes]], object]:
        if not isinstance(cursor, Cursor):
            self._check_usable()
            self._check_fence()
            with self._lock:
                manifest, live_end = self._manifest, self._write_offset
            cursor = self._reader.start(manifest, live_end, self._ledger_path)
        return self._reader.read_batch(cursor)

    # -- truncate and close ----------------------------------------------------------------

    def _do_truncate(self, upto: LogAddress) -> None:
        self._check_usable()
        with self._lock, self._flocked():
            self._check_fence()
            manifest = self._manifest
            if manifest.truncation is not None and upto.sequence <= manifest.truncation.sequence:
                return
            *older, current = manifest.ledgers
            drop = [e for e in older if e.wholly_at_or_below(upto.sequence)]
            keep = (*[e for e in older if e not in drop], current)
            self._write_manifest(fmt.Manifest(manifest.epoch, keep, upto))
        for entry in drop:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._ledger_path(entry.id))

    def _do_close(self) -> None:
        with self._lock:
            self._close_files()

    def _close_files(self) -> None:
        fds = [self._epoch_fd, self._appender.fd if self._appender is not None else None]
        self._epoch_fd = self._appender = None
        for fd in fds:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
