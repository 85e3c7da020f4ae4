"""Freed memory kept for reuse, for the processes that move bulk data (the segment store, the
Spark bridge's Python workers).

Every byte they move passes through buffers of up to a few MiB (received, framed, read from a
file, handed to Arrow) that live for milliseconds. By default glibc maps each such buffer on
its own or trims the heap as soon as it is freed, so the next one is fresh memory from the
kernel: a page fault and a page cleared per 4 KiB, which on a virtual machine that hands freed
memory back to its host costs more system time than the rest of the work (issue 16's profile in
docs/BENCHMARKS.md). Kept, the same pages serve buffer after buffer.
"""

from __future__ import annotations

import ctypes
import platform

__all__ = ["HEAP_BUFFER_BYTES_MAX", "KEEP_FREED_BYTES", "keep_freed_memory"]

#: glibc's ``mallopt`` parameters (malloc.h) and what they are set to: buffers up to 32 MiB
#: (glibc's ceiling for this one) come from the heap rather than from a mapping of their own,
#: and up to 1 GiB of freed heap stays in the process rather than going back to the system.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
KEEP_FREED_BYTES = 1 << 30
HEAP_BUFFER_BYTES_MAX = 32 << 20


def keep_freed_memory() -> bool:
    """Make freed buffers reused by this process (glibc only; True if set)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    return bool(
        mallopt(_M_MMAP_THRESHOLD, HEAP_BUFFER_BYTES_MAX)
        and mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES)
    )
