"""A ``millrace standalone`` process for whole-system tests, and a tiny REST helper."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.client.manager import StreamManager
from millrace.kernel.status_files import supervisor_state_path

READY_LINE = "Millrace is running"
START_TIMEOUT_SECONDS = 120.0


class Standalone:
    """A running ``millrace standalone`` and everything it printed."""

    def __init__(
        self,
        data_dir: Path,
        http_port: int,
        wire_port: int,
        services: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """Embedded defaults, unless ``services`` gives ``DATABASE_URL`` / ``REDIS_URL``;
        ``env``: more environment variables (``MILLRACE_TEST_UNSAFE`` ...)."""
        environ = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        environ.pop("MILLRACE_DATA_DIR", None)
        environ.update(services or {})
        environ.update(env or {})
        #: With TLS on (``env``), the CA file the node's certificate is verified with.
        self.tls_ca: str | None = None
        if environ.get("MILLRACE_TLS_ENABLED") == "1":
            self.tls_ca = environ["MILLRACE_TLS_CA_FILE"]
        self.base = f"{'https' if self.tls_ca else 'http'}://127.0.0.1:{http_port}"
        self.wire_port = wire_port
        #: The controller's gRPC port (Pravega's own clients).
        self.grpc_port = free_ports(1)[0]
        for name in ("MILLRACE_SEGMENTSTORE_METRICS_PORT", "MILLRACE_KAFKA_PORT"):
            if name not in (env or {}):  # (a free port of its own, unless the test gives one)
                environ[name] = str(free_ports(1)[0])
        self.metrics_port = int(environ["MILLRACE_SEGMENTSTORE_METRICS_PORT"])
        #: The node's Kafka listener (``bootstrap.servers=127.0.0.1:<kafka_port>``).
        self.kafka_port = int(environ["MILLRACE_KAFKA_PORT"])
        self.environ = environ
        self.data_dir = data_dir
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "millrace.ops.cli", "standalone", "--data-dir", str(data_dir),
                "--http-port", str(http_port), "--segmentstore-port", str(wire_port),
                "--grpc-port", str(self.grpc_port), "--worker-concurrency", "1",
            ],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def kafka_bootstrap(self) -> str:
        """Kafka's ``bootstrap.servers`` for the node."""
        return f"127.0.0.1:{self.kafka_port}"

    def delegation_token(self) -> str:
        """A delegation token for ``*`` (read), as the controller hands out, signed with the
        node's secret: the inherited ``MILLRACE_TOKEN_SECRET``, else the one it wrote in its
        data directory."""
        from millrace.kernel.claims import READ, mint_token

        secret = os.environ.get("MILLRACE_TOKEN_SECRET") or (
            (self.data_dir / "secrets" / "token-secret").read_text().strip()
        )
        return mint_token(secret, "*", READ, 60)

    def segment_exists(self, name: str) -> bool:
        """Whether the node's segment store has segment ``name`` (asked over the wire)."""
        from millrace.kernel import wire
        from tests.acceptance.cluster import wire_call

        reply = wire_call(
            self.wire_port, wire.GetStreamSegmentInfo(1, name, self.delegation_token())
        )
        assert isinstance(reply, wire.StreamSegmentInfo | wire.NoSuchSegment), reply
        return isinstance(reply, wire.StreamSegmentInfo)

    def store_metric(self, name: str, port: int | None = None) -> float:
        """The sum over containers of gauge ``name`` from the segment store's metrics port
        (``port``, default the node's), which wants a delegation token."""
        asked = urllib.request.Request(
            f"http://127.0.0.1:{port or self.metrics_port}/metrics",
            headers={"Authorization": f"Bearer {self.delegation_token()}"},
        )
        with urllib.request.urlopen(asked, timeout=5) as answer:
            lines = answer.read().decode().splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name + "{"))

    def manager(self, **options: Any) -> StreamManager:
        """A client of the node (over TLS, trusting its CA, when the node has TLS)."""
        return StreamManager(self.base, token=self.token, tls_ca=self.tls_ca, **options)

    @property
    def token(self) -> str:
        """The administrator's API token the node wrote on its first start."""
        return (self.data_dir / "admin-token").read_text().strip()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float = START_TIMEOUT_SECONDS, after: int = 0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines[after:]):
            if self.process.poll() is not None:
                time.sleep(0.2)  # let the reader catch the last lines
                pytest.fail(f"standalone exited ({self.process.returncode}):\n{self.output()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {text!r} after {timeout} s:\n{self.output()[-6000:]}")
            time.sleep(0.1)

    def children(self) -> list[int]:
        """Pids of the supervisor's child processes (from /proc)."""
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            return [int(pid) for pid in path.read_text().split()]
        except OSError:
            return []

    def child_running(self, marker: str) -> int:
        """The pid of the child whose command line contains ``marker``."""
        for pid in self.children():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if marker.encode() in cmdline:
                return pid
        pytest.fail(f"no child running {marker!r}; children: {self.children()}")

    def supervisor_state(self) -> dict[str, Any]:
        """The supervisor's state file: each child's state, pid, restarts and last exit."""
        path = supervisor_state_path(self.data_dir)
        for _ in range(50):  # replaced atomically, but may not exist yet
            try:
                return dict(json.loads(path.read_text())["children"])
            except (OSError, ValueError):
                time.sleep(0.05)
        pytest.fail(f"no supervisor state in {path}")

    def pid_of(self, child: str) -> int | None:
        return self.supervisor_state()[child]["pid"]

    def health(self) -> tuple[int, Any]:
        """(HTTP status, body) of ``/health``; (0, error) when the node does not answer."""
        try:
            return request(self.base, "GET", "/health", ca=self.tls_ca)
        except OSError as exc:
            return 0, repr(exc)

    def wait_health(self, up: bool, timeout: float = 90.0, naming: str = "") -> dict[str, Any]:
        """Until ``/health`` says UP (``up``) or DOWN naming ``naming``; the body."""
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.health()
            if isinstance(body, dict):
                if up and body["status"] == "UP":
                    return body
                if not up and body["status"] == "DOWN" and naming in body["details"]["down"]:
                    return body
            if time.monotonic() > deadline:
                pytest.fail(f"health never {'UP' if up else 'DOWN ' + naming}: {status} {body}")
            if self.process.poll() is not None:
                pytest.fail(f"the node exited ({self.process.returncode}):\n{self.output()}")
            time.sleep(0.05)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(60)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def operator_env(self, **env: str) -> dict[str, str]:
        """The environment of an operator on the node's host: its data directory and its token
        secret when the node was given one (a test worker's may be inherited), none of the
        test's other ``MILLRACE_*`` variables; ``env`` over them."""
        environ = {k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_")}
        environ["MILLRACE_DATA_DIR"] = str(self.data_dir)
        if self.environ.get("MILLRACE_TOKEN_SECRET"):
            environ["MILLRACE_TOKEN_SECRET"] = self.environ["MILLRACE_TOKEN_SECRET"]
        return {**environ, **env}

    def cli(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        """``millrace ARGS`` run on the node's host as an operator runs it (``operator_env``);
        with ``check``, it must succeed."""
        done = subprocess.run([sys.executable, "-m", "millrace.ops.cli", *args],
                              env=self.operator_env(**env), capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert not check or done.returncode == 0, done.stderr
        return done


def request(
    base: str,
    method: str,
    path: str,
    token: str | None = None,
    body: Any = None,
    *,
    ca: str | None = None,
) -> tuple[int, Any]:
    """(status, JSON body) of one call (``https://`` verified with the CA file ``ca``)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Token {token}")
    try:
        context = ssl.create_default_context(cafile=ca) if ca else None
        with urllib.request.urlopen(req, timeout=30, context=context) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else None
        except ValueError:
            return exc.code, raw.decode(errors="replace")


def new_stream(node: Standalone, segments: int) -> tuple[StreamManager, str]:
    """A client of ``node`` and a new scope of its own holding the stream ``st``."""
    import uuid

    scope = f"s{uuid.uuid4().hex[:8]}"
    manager = StreamManager(node.base, token=node.token)
    manager.create_scope(scope)
    manager.create_stream(scope, "st", initial_segments=segments)
    return manager, scope


def _port_pool() -> Iterator[int]:
    """This process's ports, in turn: a slice of the numbers just below the kernel's ephemeral
    range (which ``bind(port 0)`` and every outgoing connection draw from, so no other process
    takes one of these by chance), each pytest-xdist worker a slice of its own (so two workers
    never plan one port), started at a random place (so runs in a row do not meet)."""
    import random

    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    top = low - 1
    bottom = max(10000, top - 12000)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    size = (top - bottom) // max(workers, 1)
    first = bottom + size * (worker % max(workers, 1))
    offset = random.randrange(size)
    while True:
        offset = (offset + 1) % size
        yield first + offset


_POOL = _port_pool()


def _bindable(ports: range) -> bool:
    import socket

    sockets = []
    try:
        for port in ports:
            sock = socket.socket()
            sockets.append(sock)
            sock.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        for sock in sockets:
            sock.close()


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports of 127.0.0.1 that were free a moment ago, taken in turn from
    this process's pool (``_port_pool``): none is given twice until the pool comes round."""
    found: list[int] = []
    for port in _POOL:
        if _bindable(range(port, port + 1)):
            found.append(port)
        if len(found) == count:
            return found
    raise AssertionError("unreachable")  # (the pool never ends)


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive ports of 127.0.0.1 that were free a moment ago, taken
    in turn from this process's pool (the run's other ports too: no later call meets them)."""
    for _ in range(1000):
        run = [next(_POOL) for _ in range(count)]
        if run == list(range(run[0], run[0] + count)) and _bindable(range(run[0], run[-1] + 1)):
            return run[0]
    raise AssertionError(f"no {count} consecutive free ports")


def eventually(check: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """``check()``'s first truthy answer, polled every ``every`` s; AssertionError naming
    ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(every)


def running_standalone(
    factory: pytest.TempPathFactory | Path, name: str, env: dict[str, str]
) -> Iterator[Standalone]:
    """A module's ``millrace standalone`` node with ``env`` (a fixture's body), on free ports
    (its metrics port too), its data directory in a new folder of ``factory``'s (or in the
    folder given); killed at the end (its process group SIGKILLed: a graceful stop spends some
    7 s waiting for Celery's pool to exit, and is tested by itself in test_standalone)."""
    http, wire, metrics = free_ports(3)
    env = {"MILLRACE_SEGMENTSTORE_METRICS_PORT": str(metrics), **env}
    where = factory if isinstance(factory, Path) else factory.mktemp(name)
    node = Standalone(where / "data", http, wire, env=env)
    try:
        node.wait_for(READY_LINE)
        yield node
    finally:
        node.kill()
