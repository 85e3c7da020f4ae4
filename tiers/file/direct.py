"""``LedgerAppender``: a ledger's appends, direct (``tiers.direct_io``) where the file allows.

Responsibility: write each batch of a ``FileDurableDataLog`` at its ledger's end, bypassing the
page cache. The bytes of the block that holds the end (``tail``) are kept in memory, since a
direct write rewrites that block whole; the zeros a write leaves past the end read as a torn
tail (``scan.find_valid_end``) and the next write overwrites them. The ledger's length is what
the log records (its write offset, a sealed length), never the file's size. Where the file
system refuses ``O_DIRECT``, or a write finds the alignment wrong, it writes buffered from then
on, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from tiers.direct_io import BLOCK, DirectIOUnsupported, pwrite_all, set_direct, write_direct

__all__ = ["LedgerAppender"]


class LedgerAppender:
    """Appends records to one open ledger file (``fd``), which holds ``head`` and nothing else
    yet; direct when ``direct`` and the file system allows it, else buffered."""

    def __init__(self, fd: int, head: bytes, *, direct: bool = True) -> None:
        self.fd = fd
        self.end = len(head)
        self._tail = head[len(head) - len(head) % BLOCK :]
        self.direct = direct and set_direct(fd)

    def write(self, buffers: Sequence[bytes | memoryview], size: int) -> None:
        """Write ``buffers`` (``size`` bytes in all) at the ledger's end."""
        if self.direct:
            try:
                write_direct(self.fd, self._tail, buffers, self.end, size)
            except DirectIOUnsupported:
                self.direct = False  # the device's alignment is not ours: buffered from now on
                set_direct(self.fd, on=False)
            else:
                self.end += size
                self._tail = _tail_of(self._tail, buffers, self.end)
                return
        pwrite_all(self.fd, buffers, self.end)
        self.end += size


def _tail_of(tail: bytes, buffers: Sequence[bytes | memoryview], end: int) -> bytes:
    """The bytes of the block holding ``end``, once ``buffers`` followed ``tail``."""
    want = end % BLOCK
    if want == 0:
        return b""
    parts: list[bytes] = []
    for piece in reversed(buffers):
        if want <= 0:
            break
        with memoryview(piece) as view:
            part = bytes(view[-want:]) if len(view) >= want else bytes(view)
        parts.append(part)
        want -= len(part)
    if want > 0:
        parts.append(tail[len(tail) - want :])
    return b"".join(reversed(parts))
