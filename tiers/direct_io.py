"""Writes that bypass the page cache (``O_DIRECT``), for the tiers that write local files.

Responsibility: write appended bytes straight from a reused, aligned buffer to the disk, so that
neither tier-1's ledgers (``tiers.file``) nor tier-2's chunk files (``tiers.filesystem``) cost
page cache. Buffered, every byte written went through a page-cache page allocated for it; on a
machine that hands freed memory back to its host (a virtual machine with free-page reporting)
that first touch, not the disk, was most of the segment store's system time (issue 16's
profile in docs/BENCHMARKS.md). Reads (``read_direct``) come the same way: the blocks into the
aligned buffer, the bytes asked for copied out of it. Linux keeps direct and buffered access to
a file coherent.

``O_DIRECT`` wants the file offset, the length and the buffer's address aligned to the device's
block. Appends are not, so a write starts at the block that holds the file's end: that block's
bytes already in the file (``head``), then the new bytes, then zeros to the next boundary. The
head is rewritten with the bytes it holds, so a write torn at any sector leaves every byte that
was there as it was. The zeros past the end are the caller's to account for: the ledger reads
them as a torn tail and overwrites them next time; a chunk file is cut back to its length.

Where the file system refuses ``O_DIRECT`` (``set_direct`` is False, e.g. some tmpfs), or a write
finds the alignment wrong (``EINVAL``), callers write buffered instead.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import threading
from collections.abc import Sequence

__all__ = [
    "BLOCK",
    "SCRATCH_BYTES",
    "DirectIOUnsupported",
    "pwrite_all",
    "read_direct",
    "set_direct",
    "write_direct",
]

#: The alignment of offsets, lengths and the buffer (a multiple of any device's logical block).
BLOCK = 4096
#: Bytes one direct write takes at most (its aligned buffer's size, one per thread).
SCRATCH_BYTES = 4 * 1024 * 1024

_O_DIRECT = getattr(os, "O_DIRECT", 0)
_ZEROS = bytes(BLOCK)
_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 1024
_scratch = threading.local()


class DirectIOUnsupported(OSError):
    """The device refused the alignment of a direct write (nothing of it counts)."""


def set_direct(fd: int, *, on: bool = True) -> bool:
    """Turn ``O_DIRECT`` on (or off) for ``fd``; False if the file system refuses."""
    if not _O_DIRECT:
        return False
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, (flags | _O_DIRECT) if on else (flags & ~_O_DIRECT))
    except OSError:
        return False
    return True


def write_direct(
    fd: int, head: bytes, buffers: Sequence[bytes | memoryview], offset: int, size: int
) -> int:
    """Write ``buffers`` (``size`` bytes in all) at ``offset`` of ``fd`` (open with
    ``O_DIRECT``), where ``head`` is what the file holds from the block boundary at or below
    ``offset`` up to it. Returns the file's end as written (the next block boundary at or past
    ``offset + size``). Raises ``DirectIOUnsupported`` if the device refuses the alignment."""
    if len(head) != offset % BLOCK:
        raise ValueError(f"head of {len(head)} bytes for an offset {offset % BLOCK} into a block")
    scratch = _scratch_buffer()
    position = offset - len(head)
    scratch[: len(head)] = head
    used = len(head)
    written = 0
    for piece in buffers:
        with memoryview(piece) as view:
            view = view.cast("B")
            taken = 0
            while taken < len(view):
                n = min(len(view) - taken, SCRATCH_BYTES - used)
                scratch[used : used + n] = view[taken : taken + n]
                used += n
                taken += n
                if used == SCRATCH_BYTES:
                    _write_block_run(fd, scratch, used, position)
                    position += used
                    used = 0
            written += taken
    if written != size:
        raise ValueError(f"buffers hold {written} bytes, not {size}")
    if used:
        padded = -(-used // BLOCK) * BLOCK
        scratch[used:padded] = _ZEROS[: padded - used]
        _write_block_run(fd, scratch, padded, position)
        position += padded
    return position


def read_direct(fd: int, offset: int, length: int) -> bytes:
    """``length`` bytes at ``offset`` of ``fd`` (open with ``O_DIRECT``), fewer at the file's
    end: the blocks that hold them read into this thread's aligned buffer, the bytes copied out.
    Raises ``DirectIOUnsupported`` if the device refuses the alignment."""
    scratch = _scratch_buffer()
    parts: list[bytes] = []
    with memoryview(scratch) as view:
        while length > 0:
            skip = offset % BLOCK
            want = min(-(-(skip + length) // BLOCK) * BLOCK, SCRATCH_BYTES)
            try:
                got = os.preadv(fd, [view[:want]], offset - skip)
            except OSError as error:
                if error.errno == errno.EINVAL:
                    refused = f"direct read refused: {error}"
                    raise DirectIOUnsupported(error.errno, refused) from error
                raise
            taken = min(got - skip, length)
            if taken <= 0:
                break  # the file's end
            parts.append(bytes(view[skip : skip + taken]))
            offset += taken
            length -= taken
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _write_block_run(fd: int, scratch: mmap.mmap, length: int, offset: int) -> None:
    try:
        with memoryview(scratch) as view:
            pwrite_all(fd, [view[:length]], offset)
    except OSError as error:
        if error.errno == errno.EINVAL:
            raise DirectIOUnsupported(error.errno, f"direct write refused: {error}") from error
        raise


def _scratch_buffer() -> mmap.mmap:
    """This thread's aligned write buffer (anonymous memory is page-aligned), made once."""
    buffer: mmap.mmap | None = getattr(_scratch, "buffer", None)
    if buffer is None:
        buffer = _scratch.buffer = mmap.mmap(-1, SCRATCH_BYTES)
    return buffer


def pwrite_all(fd: int, buffers: Sequence[bytes | memoryview], offset: int) -> None:
    """Write all of ``buffers`` at ``offset``, in as few system calls as possible."""
    for first in range(0, len(buffers), _IOV_MAX):
        chunk = list(buffers[first : first + _IOV_MAX])
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
