"""A slow, lossy network path on loopback: a relay that delays what it forwards, for real.

This kernel has no ``tc netem``, so a slow link is made in user space: ``SlowLink(port)``
listens on a free port of 127.0.0.1 and forwards each connection to ``port``, both ways, from a
thread of its own, holding each chunk ``delay_ms`` (± ``jitter_ms``) before passing it on, in
order (as TCP delivers), and a ``loss`` share of the chunks a retransmission's worth longer
(``retransmit_ms``: what a lost segment costs a TCP connection, which resends it). Both ends
are the real client and server; only the path between them is slowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

from tests.acceptance.faulty_proxy import serve_on_a_thread

__all__ = ["SlowLink"]


class SlowLink:
    def __init__(
        self, target_port: int, *, delay_ms: float = 100.0, jitter_ms: float = 20.0,
        loss: float = 0.02, retransmit_ms: float = 300.0, target_host: str = "127.0.0.1",
    ) -> None:  # fmt: skip
        self.target = (target_host, target_port)
        self._slow = (delay_ms / 1000, jitter_ms / 1000, loss, retransmit_ms / 1000)
        self.delay_s = self.jitter_s = self.loss = self.retransmit_s = 0.0
        self.random = random.Random(7)
        #: Chunks forwarded, and those held as lost and resent.
        self.chunks = self.resent = 0
        self.loop, self.server, self.thread = serve_on_a_thread(self._accept)
        self.port = int(self.server.sockets[0].getsockname()[1])

    def slow(self) -> None:
        """From now on the link is slow and lossy (as configured)."""
        self.delay_s, self.jitter_s, self.loss, self.retransmit_s = self._slow

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(self._delay())  # (the SYN's way)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    def _delay(self) -> float:
        delay = self.delay_s + self.random.uniform(-self.jitter_s, self.jitter_s)
        if self.random.random() < self.loss:
            self.resent += 1
            delay += self.retransmit_s
        return max(delay, 0.0)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read chunks as they come; each leaves at its due time, never before an earlier one."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, writer))
        last = 0.0
        try:
            while chunk := await reader.read(1 << 16):
                last = max(time.monotonic() + self._delay(), last)
                self.chunks += 1
                queue.put_nowait((last, chunk))
        except ConnectionError:
            pass
        queue.put_nowait((last, b""))
        with contextlib.suppress(Exception):
            await sender

    @staticmethod
    async def _send(
        queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                due, chunk = await queue.get()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if not chunk:
                    break
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def close(self) -> None:
        async def shut() -> None:
            self.server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
