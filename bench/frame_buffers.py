"""What numpy buys the wire's receive path: large frames received over loopback TCP.

Usage::

    python bench/frame_buffers.py [--frames-mib 512] [--sizes 65536,262144,1048576,8388608]

A loopback server sends frames of each size (header and payload, as a segment store sends
read replies); the receiving side is an ``asyncio.BufferedProtocol`` around the wire's own
``FrameAssembler``, as the client's and the node's connections are. A frame of 64 KiB or
more gets a buffer of its own that the socket fills directly; the run times that path as
shipped (``numpy.empty``: an uncleared buffer) and with ``bytearray(n)`` (a cleared one,
what the base install would use without numpy), side by side, best of three each.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

from millrace.kernel.wire import framing
from millrace.kernel.wire.codec import FRAME_HEADER

TYPE_CODE = 9  # any type: the assembler only splits


class _Bytearrays:
    """Stands in for numpy in ``framing``: ``empty`` gives a cleared ``bytearray``."""

    uint8 = None

    @staticmethod
    def empty(n: int, _dtype: Any) -> Any:
        class _Data:
            data = memoryview(bytearray(n))

        return _Data


class _Receiver(asyncio.BufferedProtocol):
    def __init__(self, expected: int, done: asyncio.Future[float]) -> None:
        self.assembler = framing.FrameAssembler()
        self.expected, self.done, self.received = expected, done, 0

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.assembler.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.received += len(self.assembler.buffer_updated(nbytes))
        if self.received == self.expected and not self.done.done():
            self.done.set_result(time.perf_counter())


async def _once(size: int, count: int) -> float:
    """Seconds to receive ``count`` frames of ``size`` payload bytes."""
    frame = FRAME_HEADER.pack(TYPE_CODE, size) + b"\x5a" * size

    async def send(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(count):
            writer.write(frame)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(send, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    done: asyncio.Future[float] = loop.create_future()
    started = time.perf_counter()
    transport, _ = await loop.create_connection(lambda: _Receiver(count, done), "127.0.0.1", port)
    finished = await done
    transport.close()
    server.close()
    await server.wait_closed()
    return finished - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames-mib", type=int, default=512, help="MiB of frames per run")
    p.add_argument("--sizes", default="65536,262144,1048576,8388608")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.frames_mib < 1 or min(sizes) < 1:
        p.error("--frames-mib and every size must be at least 1")
    print(f"{'frame':>9} {'numpy.empty MiB/s':>18} {'bytearray MiB/s':>16} {'ratio':>6}")
    for size in sizes:
        count = max(1, (args.frames_mib << 20) // size)
        figures = {}
        for name, allocator in (("numpy", np), ("bytearray", _Bytearrays)):
            framing.np = allocator  # type: ignore[assignment]
            best = min(asyncio.run(_once(size, count)) for _ in range(3))
            figures[name] = count * size / best / (1 << 20)
        framing.np = np
        ratio = figures["numpy"] / figures["bytearray"]
        print(f"{size:>9,} {figures['numpy']:>18,.0f} {figures['bytearray']:>16,.0f} {ratio:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
