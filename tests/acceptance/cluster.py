"""A Millrace cluster of whole processes on loopback, for the cluster tests.

Responsibility: ``LocalCluster`` runs, on one metadata database (a PostgreSQL server of the
test's own, ``tests.acceptance.postgres``): ``millrace migrate``, segment store nodes
(``millrace segmentstore --advertise``) whose tier-1 and tier-2 are shared directories (the
one-host stand-in for shared tiers), controllers (each may lead), a Celery worker and two
beats, one of which ticks (the controllers, worker and beats share one data directory: the
embedded broker's files).
Authentication is on; the administrator's token comes from ``millrace token create``. Each
process is its own process group, so the tests SIGKILL, SIGSTOP and SIGCONT it for real; every
one is killed when the test ends. ``status()`` is ``GET /v1/cluster`` with the token.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import struct
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from millrace.kernel import wire
from millrace.kernel.claims import READ, mint_token
from millrace.kernel.naming import container_for
from tests.acceptance.certs import Certs
from tests.acceptance.netns import PrivateNetwork
from tests.acceptance.standalone_node import eventually, free_ports

__all__ = ["LocalCluster", "Process"]

ROOT = Path(__file__).resolve().parents[2]


class Process:
    """One process of the cluster, in its own process group; its output in ``<name>.log``.
    ``prefix``: what it runs under (``ip netns exec ...``: a host of its own)."""

    def __init__(
        self, name: str, args: list[str], env: dict[str, str], where: Path,
        prefix: list[str] | None = None,
    ) -> None:  # fmt: skip
        self.name, self.args, self.env, self.where = name, args, env, where
        self.prefix = prefix or []
        self.log = where / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "millrace.ops.cli", *self.args],
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            assert self.popen is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(30)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class LocalCluster:
    def __init__(
        self,
        where: Path,
        database_url: str,
        *,
        nodes: int = 3,
        controllers: int = 2,
        containers: int = 6,
        unsafe: str = "",
        environ: dict[str, str] | None = None,
        certs: Certs | None = None,
        network: PrivateNetwork | None = None,
    ) -> None:
        """``certs``: TLS on every port of every process, the nodes' wire and metrics ports
        asking for client certificates (mutual TLS), all made by this CA. ``network``: each
        segment store node runs in a host of its own (``tests.acceptance.netns``), reaching the
        database at the network's database address (its server must listen there)."""
        self.where = where
        self.network = network
        self.database_url = database_url
        self.containers = containers
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("MILLRACE_") and k not in ("DATABASE_URL", "REDIS_URL")
        }
        shared = where / "shared"
        self.env = base | {
            "DATABASE_URL": database_url,
            "PYTHONUNBUFFERED": "1",
            "MILLRACE_TOKEN_SECRET": "cluster-test-secret-of-more-than-32-bytes",
            "MILLRACE_SECRET_KEY": "cluster-test-key",
            "MILLRACE_CONTAINERS": str(containers),
            "MILLRACE_TIER1_OPTIONS": json.dumps({"root": str(shared / "tier1")}),
            "MILLRACE_TIER2_OPTIONS": json.dumps({"root": str(shared / "tier2")}),
            "MILLRACE_SEGMENTSTORE_METRICS_PORT": "0",
            "MILLRACE_TIER2_FLUSH_DELAY_MS": "1000",
        }
        if unsafe:
            self.env["MILLRACE_TEST_UNSAFE"] = unsafe
        #: With TLS: the CA file, and the certificate and key a client presents.
        self.tls_ca: str | None = None
        self.client_cert: tuple[str, str] | None = None
        if certs is not None:
            cert, key = certs.issue("cluster")
            self.env |= certs.env(cert, key, MILLRACE_TLS_CLIENT_AUTH="1")
            self.tls_ca, self.client_cert = str(certs.ca_file), (str(cert), str(key))
        self.env |= environ or {}
        self.web_dir = where / "web"
        #: Node index -> environment over the cluster's for that node alone (e.g. its own
        #: ``DATABASE_URL`` through a proxy a test cuts).
        self.node_env: dict[int, dict[str, str]] = {}
        #: Controller index -> environment over the cluster's for that controller alone.
        self.controller_env: dict[int, dict[str, str]] = {}
        #: Node index -> the address it advertises instead of its own (a relay in front of it).
        self.node_advertise: dict[int, str] = {}
        self.processes: dict[str, Process] = {}
        self.node_ports = free_ports(nodes)
        #: Each node's Kafka listener (``bootstrap.servers``).
        self.kafka_ports = free_ports(nodes)
        self.http_ports = free_ports(controllers)
        self.grpc_ports = free_ports(controllers)
        self.token = ""

    @property
    def kafka_bootstrap(self) -> str:
        """Kafka's ``bootstrap.servers``: every node's listener."""
        return ",".join(f"{self.node_host(i)}:{port}" for i, port in enumerate(self.kafka_ports))

    # -- starting ----------------------------------------------------------------------------

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "millrace.ops.cli", *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def running(self) -> Iterator[LocalCluster]:
        """Started, then closed at the end with its processes' output printed (a fixture's
        body: ``yield from LocalCluster(...).running()``)."""
        try:
            self.start()
            yield self
        finally:
            self.close()
            print(self.outputs()[-20000:])

    def start(self) -> None:
        web = ["--data-dir", str(self.web_dir)]
        self.cli("migrate", "-v", "0", *web)
        self.token = (
            self.cli("token", "create", "admin", "--superuser", *web).strip().splitlines()[-1]
        )
        for i in range(len(self.node_ports)):
            self.start_node(i)
        for i in range(len(self.http_ports)):
            self.start_controller(i)
        self._spawn("worker", "worker", *web, "--concurrency", "2")
        for i in range(2):  # two beats: one holds the beat lease and ticks
            self._spawn(f"beat-{i}", "beat", *web, "--schedule", str(self.where / f"beat-{i}"))
        for port in self.http_ports:
            eventually(lambda p=port: self._answers(p), 60, f"the controller on port {port}")
        eventually(self.spread, 60, "every container assigned to a live node")
        if self.tls_ca is None:  # (the probe speaks plaintext)
            eventually(self.settled, 60, "every node running the containers assigned to it")

    def start_controller(self, i: int) -> Process:
        """Start controller ``i`` (again, after a kill: same ports)."""
        web = ["--data-dir", str(self.web_dir)]
        return self._spawn(
            f"controller-{i}", "controller", *web, "--http-port", str(self.http_ports[i]),
            "--grpc-port", str(self.grpc_ports[i]), env=self.controller_env.get(i),
        )  # fmt: skip

    def start_node(self, i: int) -> Process:
        """Start segment store node ``i`` (again, after a kill: same port, same data dir), with
        ``node_env[i]`` over the cluster's environment."""
        port, host = self.node_ports[i], self.node_host(i)
        env, prefix = dict(self.node_env.get(i, {})), None
        while len(self.kafka_ports) <= i:  # (a node added to the cluster)
            self.kafka_ports.append(free_ports(1)[0])
        env.setdefault("MILLRACE_KAFKA_PORT", str(self.kafka_ports[i]))
        if self.network is not None:
            prefix = self.network.prefix(i)
            env.setdefault("DATABASE_URL", self.database_url.replace(
                "@127.0.0.1:", f"@{self.network.database}:"
            ))  # fmt: skip
        return self._spawn(
            f"node-{i}",
            "segmentstore",
            "--data-dir",
            str(self.where / f"node-{i}"),
            "--host",
            host,
            "--port",
            str(port),
            "--advertise",
            self.node_advertise.get(i, f"{host}:{port}"),
            "--node-id",
            f"node-{i}",
            env=env,
            prefix=prefix,
        )

    def node_host(self, i: int) -> str:
        """The address node ``i`` listens on and advertises."""
        return "127.0.0.1" if self.network is None else self.network.addresses[i]

    def _spawn(
        self, name: str, *args: str, env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
    ) -> Process:  # fmt: skip
        self.processes[name] = Process(name, list(args), self.env | (env or {}), self.where, prefix)
        return self.processes[name]

    def _context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=self.tls_ca) if self.tls_ca else None

    def answers(self, i: int) -> bool:
        """Whether controller ``i`` answers."""
        return self._answers(self.http_ports[i])

    def _answers(self, port: int) -> bool:
        url = f"{self.scheme}://127.0.0.1:{port}/health/liveness"
        try:
            with urllib.request.urlopen(url, timeout=5, context=self._context()):
                return True
        except OSError:
            return False

    @property
    def scheme(self) -> str:
        return "https" if self.tls_ca else "http"

    # -- looking at it -----------------------------------------------------------------------

    def base(self, i: int = 0) -> str:
        return f"{self.scheme}://127.0.0.1:{self.http_ports[i]}"

    def status(self, i: int = 0) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.base(i)}/v1/cluster", headers={"Authorization": f"Token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=30, context=self._context()) as answer:
            found: dict[str, Any] = json.loads(answer.read())
        return found

    def owners(self, i: int = 0) -> dict[int, str]:
        """Container -> the segment store node it is assigned to."""
        return {
            c: n["nodeId"]
            for n in self.status(i)["nodes"]
            for c in n["containers"]
            if n["role"] == "segment store"
        }

    def spread(self, among: set[str] | None = None, via: int = 0) -> bool:
        """Every container assigned, to the nodes ``among`` (default: all started) and no
        other (asked of controller ``via``)."""
        among = among or {name for name in self.processes if name.startswith("node-")}
        try:
            owners = self.owners(via)
        except OSError:
            return False
        return len(owners) == self.containers and set(owners.values()) == among

    def settled(self, via: int = 0) -> bool:
        """Every container runs on the node it is assigned to (a node learns of a new
        container at its next renewal: until then it answers WrongHost for it)."""
        token = mint_token(self.env["MILLRACE_TOKEN_SECRET"], "*", READ, 60)
        try:
            owners = self.owners(via)
        except OSError:
            return False
        for container, node in owners.items():
            name = next(
                name for i in range(100_000)
                if container_for(name := f"settle/s{i}/0.#epoch.0", self.containers) == container
            )  # fmt: skip
            i = int(node.rsplit("-", 1)[1])
            try:
                reply = wire_call(
                    self.node_ports[i], wire.GetStreamSegmentInfo(1, name, token), self.node_host(i)
                )
            except OSError:
                return False
            if not isinstance(reply, wire.StreamSegmentInfo | wire.NoSuchSegment):
                return False
        return True

    def restore(self, timeout: float = 120) -> None:
        """Leave the cluster as a test found it (one shared by a module's tests): every
        process woken and running (a killed one started again, on the same ports), every
        controller answering, every container on a live node and served."""
        for process in self.processes.values():
            process.signal(signal.SIGCONT)
        for name, process in self.processes.items():
            if process.alive:
                continue
            kind, _, index = name.rpartition("-")
            if kind == "controller":
                self.start_controller(int(index))
            elif kind == "node":
                self.start_node(int(index))
            else:
                process.start()
        for port in self.http_ports:
            eventually(lambda p=port: self._answers(p), timeout, f"the controller on port {port}")
        eventually(self.spread, timeout, "every container assigned to a live node")
        if self.tls_ca is None:
            eventually(self.settled, timeout, "every node running the containers assigned to it")
        dead = [name for name, process in self.processes.items() if not process.alive]
        assert not dead, f"not running after a restart: {dead}\n{self.outputs()}"

    def leader(self) -> str | None:
        found = self.status()["leader"]
        return None if found is None else str(found["holder"])

    def wait_for_line(self, name: str, text: str, timeout: float, after: int = 0) -> None:
        eventually(
            lambda: text in self.processes[name].output()[after:],
            timeout,
            f"{name} printing {text!r}",
        )

    def output(self, name: str) -> str:
        return self.processes[name].output()

    def close(self) -> None:
        for process in self.processes.values():
            with contextlib.suppress(Exception):
                process.kill()

    def outputs(self) -> str:
        return "\n".join(
            f"===== {name}\n{p.output()[-3000:]}" for name, p in self.processes.items()
        )


def wire_call(port: int, command: object, host: str = "127.0.0.1") -> object:
    """One request on a new connection to a node (Hello first), and its reply."""
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.sendall(wire.encode_frame(wire.Hello(15, 5)) + wire.encode_frame(command))
        replies = []
        buffer = b""
        while len(replies) < 2:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return None
            buffer += chunk
            while len(buffer) >= 8:
                kind, length = struct.unpack(">ii", buffer[:8])
                if len(buffer) < 8 + length:
                    break
                replies.append(wire.decode_frame(kind, buffer[8 : 8 + length]))
                buffer = buffer[8 + length :]
        return replies[1]
