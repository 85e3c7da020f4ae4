"""Cutting a TCP byte stream into frames, receiving straight into reusable buffers.

Responsibility: the receive side of framing for ``asyncio.BufferedProtocol`` (server and client).
Small frames are received into one reusable buffer and copied out once; a frame whose payload is
at least ``large_payload_bytes_min`` gets a buffer of its own that the socket fills directly and
that is handed out as is (no copy). That buffer is left uncleared (``numpy.empty``): every byte of
it is received before it is handed out, so clearing it first (``bytearray(n)``) would write
each byte twice. A negative or oversize length raises ``FramingError``: the
stream cannot be resynchronised, so the connection must be closed.
"""

from __future__ import annotations

import numpy as np

from .codec import FRAME_HEADER, FRAME_HEADER_BYTES, FRAME_PAYLOAD_BYTES_MAX, ProtocolError

__all__ = ["FrameAssembler", "FramingError"]

Frame = tuple[int, bytes | memoryview]


class FramingError(ProtocolError):
    """The byte stream is not a sequence of well-formed frames (bad length)."""


class FrameAssembler:
    """Incremental frame splitter: ``get_buffer`` / ``buffer_updated`` -> complete frames."""

    def __init__(
        self,
        *,
        buffer_bytes: int = 256 * 1024,
        large_payload_bytes_min: int = 64 * 1024,
        payload_bytes_max: int = FRAME_PAYLOAD_BYTES_MAX,
    ) -> None:
        if large_payload_bytes_min + FRAME_HEADER_BYTES > buffer_bytes // 2:
            raise ValueError("buffer_bytes must hold two small frames")
        self._buf = bytearray(buffer_bytes)
        self._mv = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._large_min = large_payload_bytes_min
        self._payload_max = payload_bytes_max
        self._big: memoryview | None = None
        self._big_type = 0
        self._big_filled = 0

    def get_buffer(self) -> memoryview:
        """Where the next received bytes should go (never empty)."""
        if self._big is not None:
            return self._big[self._big_filled :]
        if len(self._buf) - self._end < self._large_min:
            self._compact()
        return self._mv[self._end :]

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        """Account for ``nbytes`` received into the last buffer; return the completed frames."""
        if self._big is not None:
            return self._big_updated(self._big, nbytes)
        self._end += nbytes
        frames: list[Frame] = []
        self._split(frames)
        if self._start == self._end:
            self._start = self._end = 0
        return frames

    def feed(self, data: bytes) -> list[Frame]:
        """Convenience for tests and stream readers: copy ``data`` in and split."""
        frames: list[Frame] = []
        view = memoryview(data)
        while view:
            buf = self.get_buffer()
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            view = view[n:]
            frames.extend(self.buffer_updated(n))
        return frames

    def _big_updated(self, big: memoryview, nbytes: int) -> list[Frame]:
        self._big_filled += nbytes
        if self._big_filled < len(big):
            return []
        frame = (self._big_type, big)
        self._big = None
        return [frame]

    def _split(self, frames: list[Frame]) -> None:
        mv, end = self._mv, self._end
        while end - self._start >= FRAME_HEADER_BYTES:
            start = self._start
            type_code, length = FRAME_HEADER.unpack_from(mv, start)
            if length < 0 or length > self._payload_max:
                raise FramingError(f"frame of type {type_code} has bad length {length}")
            payload_start = start + FRAME_HEADER_BYTES
            payload_end = payload_start + length
            if payload_end <= end:
                frames.append((type_code, bytes(mv[payload_start:payload_end])))
                self._start = payload_end
            elif length >= self._large_min:
                self._start_big(type_code, length, payload_start)
                return
            else:
                return

    def _start_big(self, type_code: int, length: int, payload_start: int) -> None:
        have = self._end - payload_start
        big = np.empty(length, np.uint8).data  # (filled below and by the socket)
        big[:have] = self._mv[payload_start : self._end]
        self._big, self._big_type, self._big_filled = big, type_code, have
        self._start = self._end = 0

    def _compact(self) -> None:
        pending = bytes(self._mv[self._start : self._end])
        self._buf[: len(pending)] = pending
        self._start, self._end = 0, len(pending)
