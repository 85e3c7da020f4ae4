"""A TCP proxy on loopback that injects connection faults, for whole-process tests.

``FaultyProxy(target_port)`` listens on a free port of 127.0.0.1 and forwards each connection
to the target, both ways, from a thread of its own. Faults, each on demand:

* ``cut()``: every open connection is reset (RST) at once, both sides;
* ``stall(seconds)``: nothing is forwarded either way for a while, the connections stay open
  (a frozen network path);
* ``reset_mid_frame()``: the next chunk coming back from the target is forwarded only in part
  (half of it, so a frame arrives cut short) and then the connection is reset;
  ``reset_mid_frame(after=n)``: the next ``n`` bytes back are forwarded, then the reset (an
  HTTP answer whose headers arrived and whose body stops);
* ``refuse(True)``: every open connection is reset, and each new one too as soon as it is
  accepted, until ``refuse(False)`` (a server that is down).

A test double of a network, not of Millrace: both ends are the real client and server.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Awaitable, Callable
from typing import Any


class FaultyProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.connections: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self.flowing = asyncio.Event()
        self.flowing.set()
        self._reset_next = False
        self._reset_after: int | None = None
        self._refusing = False
        self.resets = 0
        self.loop, self.server, self.thread = serve_on_a_thread(self._accept)
        self.port = int(self.server.sockets[0].getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        pair = (writer, up_writer)
        self.connections.add(pair)
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, pair, downstream=False),
                self._pump(up_reader, writer, pair, downstream=True),
            )
        finally:
            self.connections.discard(pair)
            for side in pair:
                _reset(side)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pair: Any,
        downstream: bool,
    ) -> None:  # fmt: skip
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await reader.read(65536):
                await self.flowing.wait()
                if downstream and self._reset_next and len(chunk) > 1:
                    keep = len(chunk) // 2
                    if self._reset_after is not None:
                        keep = min(self._reset_after, len(chunk))
                        self._reset_after -= keep
                    if not self._reset_after:  # (None: the half chunk; 0: the count is out)
                        self._reset_next, self._reset_after = False, None
                        self.resets += 1
                        writer.write(chunk[:keep])
                        await writer.drain()
                        break
                writer.write(chunk)
                await writer.drain()
        for side in pair:
            _reset(side)

    # -- faults (called from the test's thread) ---------------------------------------------

    def cut(self) -> int:
        """Reset every open connection; how many there were."""

        def cut_all() -> int:
            count = len(self.connections)
            for pair in list(self.connections):
                for side in pair:
                    _reset(side)
            return count

        return self._call(cut_all)

    def stall(self, seconds: float) -> None:
        """Forward nothing for ``seconds`` (returns once the traffic flows again)."""
        self._call(self.flowing.clear)
        threading.Event().wait(seconds)
        self._call(self.flowing.set)

    def refuse(self, on: bool) -> None:
        """Reset every connection, open or new, while ``on``."""
        self._refusing = on
        if on:
            self.cut()

    def reset_mid_frame(self, after: int | None = None) -> None:
        """The next chunk back from the target arrives in part (or the next ``after`` bytes),
        then the connection resets."""
        self._reset_after = after
        self._reset_next = True

    def _call(self, fn: Any) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def close(self) -> None:
        async def shut() -> None:
            self.server.close()
            for pair in list(self.connections):
                for side in pair:
                    _reset(side)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def serve_on_a_thread(
    accept: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> tuple[asyncio.AbstractEventLoop, asyncio.Server, threading.Thread]:
    """An event loop on a daemon thread of its own, serving ``accept`` on a free port of
    127.0.0.1 (a test's relay: the test's own thread stays free to drive the faults)."""
    loop = asyncio.new_event_loop()
    found: list[asyncio.Server] = []
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        found.append(loop.run_until_complete(asyncio.start_server(accept, "127.0.0.1", 0)))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    return loop, found[0], thread


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a crashed peer or a middlebox does."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError, RuntimeError):
        writer.transport.abort()
