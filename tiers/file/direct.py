"""Appends to a ledger file that bypass the page cache (``O_DIRECT``), where the file allows.

Responsibility: write each batch of a ``FileDurableDataLog`` straight from one reused, aligned
buffer to the disk, so that tier-1 costs no page cache. Buffered, every byte appended went
through a page-cache page allocated for it; on a machine that hands freed memory back to its
host (a virtual machine with free-page reporting) that first touch, not the disk, was most of
the log's system time (issue 16's profile in docs/BENCHMARKS.md).

``O_DIRECT`` wants the file offset, the length and the buffer's address aligned to the
device's block. A ledger's appends are not, so each write starts at the block that holds the
ledger's end: the bytes of that block already on disk (kept in memory, ``tail``), then the new
records, then zeros to the next block boundary. Rewriting the tail block writes the same bytes
it holds, so a write torn at any sector leaves every acknowledged byte as it was; the zeros past
the end read as a torn tail (``scan.find_valid_end``) and are overwritten by the next write.
The ledger's length is what the log records (its write offset, a sealed length), never the
file's size.

Where the file system refuses ``O_DIRECT`` (``fcntl`` fails, e.g. on some tmpfs), or the first
write finds the alignment wrong, the appender writes buffered from then on, as before.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
from collections.abc import Sequence

__all__ = ["BLOCK", "LedgerAppender"]

#: The alignment of offsets, lengths and the buffer (a multiple of any device's logical block).
BLOCK = 4096

_O_DIRECT = getattr(os, "O_DIRECT", 0)
_ZEROS = bytes(BLOCK)


class LedgerAppender:
    """Appends records to one open ledger file (``fd``), which holds ``head`` and nothing else
    yet; direct when ``direct`` and the file system allows it, else buffered."""

    def __init__(self, fd: int, head: bytes, *, direct: bool = True) -> None:
        self.fd = fd
        self.end = len(head)
        self._tail = head[len(head) - len(head) % BLOCK :]
        self._buffer: mmap.mmap | None = None
        self.direct = direct and _O_DIRECT != 0 and _set_direct(fd)

    def close(self) -> None:
        """Let go of the buffer (the file descriptor is the caller's)."""
        if self._buffer is not None:
            self._buffer.close()
            self._buffer = None

    def write(self, buffers: Sequence[bytes | memoryview], size: int) -> None:
        """Write ``buffers`` (``size`` bytes in all) at the ledger's end."""
        if self.direct:
            try:
                self._write_direct(buffers, size)
                return
            except OSError as error:
                if error.errno != errno.EINVAL:
                    raise
                # The device's alignment is not ours: buffered from now on (nothing written).
                self.direct = False
                _set_direct(self.fd, on=False)
        _pwrite_all(self.fd, buffers, self.end)
        self.end += size
        self._tail = b""  # (only read when direct)

    def _write_direct(self, buffers: Sequence[bytes | memoryview], size: int) -> None:
        tail = self._tail
        start = self.end - len(tail)
        total = len(tail) + size
        padded = -(-total // BLOCK) * BLOCK
        buffer = self._buffer_of(padded)
        buffer[: len(tail)] = tail
        position = len(tail)
        for piece in buffers:
            n = len(piece)
            buffer[position : position + n] = piece
            position += n
        if position != total:
            raise ValueError(f"buffers hold {position - len(tail)} bytes, not {size}")
        buffer[total:padded] = _ZEROS[: padded - total]
        with memoryview(buffer) as view:
            _pwrite_all(self.fd, [view[:padded]], start)
        kept = total - total % BLOCK
        self._tail = bytes(buffer[kept:total])
        self.end += size

    def _buffer_of(self, size: int) -> mmap.mmap:
        """The reused, page-aligned write buffer, grown to at least ``size`` bytes."""
        if self._buffer is None or len(self._buffer) < size:
            if self._buffer is not None:
                self._buffer.close()
            self._buffer = mmap.mmap(-1, -(-size // (1 << 20)) * (1 << 20))
        return self._buffer


def _set_direct(fd: int, *, on: bool = True) -> bool:
    """Turn ``O_DIRECT`` on (or off) for ``fd``; False if the file system refuses."""
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | _O_DIRECT if on else flags & ~_O_DIRECT)
    except OSError:
        return False
    return True


def _pwrite_all(fd: int, buffers: Sequence[bytes | memoryview], offset: int) -> None:
    """Write ``buffers`` at ``offset``, all of them, in as few system calls as possible."""
    iov_max = _IOV_MAX
    for first in range(0, len(buffers), iov_max):
        chunk = list(buffers[first : first + iov_max])
        size = sum(len(b) for b in chunk)
        done = os.pwritev(fd, chunk, offset)
        while done < size:  # rare (disk full, a signal): the rest piece by piece
            skip = done
            for piece in chunk:
                if skip >= len(piece):
                    skip -= len(piece)
                    continue
                with memoryview(piece) as view:
                    done += os.pwrite(fd, view[skip:], offset + done)
                break
        offset += size


_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 1024
