"""``millrace standalone`` as a user runs it: one command, a whole node, clean stop, restart.

The command runs in a subprocess on embedded defaults (``DATABASE_URL`` and ``REDIS_URL``
removed: SQLite, filesystem broker, file tier-1, filesystem tier-2) with a fresh data
directory and free ports. The test goes through what a user sees: the printed endpoints, the
administrator's token file, the REST API with and without it, a child process killed with
SIGKILL and brought back, a clean stop on SIGTERM that leaves no process behind, and a restart
that keeps the streams.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

READY_LINE = "Millrace is running"
START_TIMEOUT_SECONDS = 120.0


class Standalone:
    """A running ``millrace standalone`` and everything it printed."""

    def __init__(self, data_dir: Path, http_port: int, wire_port: int) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        env.pop("MILLRACE_DATA_DIR", None)
        self.base = f"http://127.0.0.1:{http_port}"
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "millrace.cli", "standalone", "--data-dir", str(data_dir),
                "--http-port", str(http_port), "--segmentstore-port", str(wire_port),
                "--worker-concurrency", "1",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

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

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(60)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)


def request(
    base: str, method: str, path: str, token: str | None = None, body: Any = None
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Token {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else None
        except ValueError:
            return exc.code, raw.decode(errors="replace")


@pytest.fixture
def ports() -> Iterator[tuple[int, int]]:
    import socket

    socks = []
    for _ in range(2):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        socks.append(sock)
    found = tuple(int(s.getsockname()[1]) for s in socks)
    for sock in socks:
        sock.close()
    yield found  # type: ignore[misc]


@pytest.fixture
def node(tmp_path: Path, ports: tuple[int, int]) -> Iterator[Standalone]:
    running = Standalone(tmp_path / "data", *ports)
    yield running
    running.kill()


def _gone(pids: list[int]) -> bool:
    return all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in pids)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_one_command_runs_a_whole_node(node: Standalone, tmp_path: Path) -> None:
    node.wait_for(READY_LINE)
    out = node.output()
    for where in ("REST API", "WebSockets", "wire protocol", "admin-token"):
        assert where in out
    token_file = tmp_path / "data" / "admin-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert token in out  # printed on first start

    assert request(node.base, "GET", "/health/liveness")[0] == 200
    assert request(node.base, "GET", "/v1/scopes")[0] in (401, 403)
    assert request(node.base, "GET", "/v1/scopes", token="not-a-token")[0] in (401, 403)
    status, body = request(node.base, "GET", "/v1/scopes", token=token)
    assert (status, body) == (200, {"scopes": []})

    status, _ = request(node.base, "POST", "/v1/scopes", token, {"scopeName": "demo"})
    assert status == 201
    stream = {"streamName": "orders", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS",
              "minSegments": 3}}  # fmt: skip
    status, body = request(node.base, "POST", "/v1/scopes/demo/streams", token, stream)
    assert status == 201, body
    assert body["scalingPolicy"]["minSegments"] == 3

    # A child killed with SIGKILL is restarted; the node keeps serving.
    victim = node.child_running("segmentstore")
    mark = len(node.lines)
    os.kill(victim, signal.SIGKILL)
    node.wait_for("segmentstore is back", timeout=60, after=mark)
    # Sealing runs on the worker and reaches the segment store: both are up.
    status, body = request(
        node.base, "PUT", "/v1/scopes/demo/streams/orders/state", token, {"streamState": "SEALED"}
    )
    assert (status, body) == (200, {"streamState": "SEALED"})

    children = node.children()
    assert len(children) == 4
    assert node.stop() == 0
    deadline = time.monotonic() + 10
    while not _gone(children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(children), "a child outlived the supervisor"
    assert "millrace standalone: stopped" in node.output()


def test_restart_keeps_streams_and_credentials(tmp_path: Path, ports: tuple[int, int]) -> None:
    first = Standalone(tmp_path / "data", *ports)
    try:
        first.wait_for(READY_LINE)
        token = (tmp_path / "data" / "admin-token").read_text().strip()
        assert request(first.base, "POST", "/v1/scopes", token, {"scopeName": "kept"})[0] == 201
        body = {
            "streamName": "s",
            "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2},
        }
        assert request(first.base, "POST", "/v1/scopes/kept/streams", token, body)[0] == 201
        assert first.stop() == 0
    finally:
        first.kill()
    second = Standalone(tmp_path / "data", *ports)
    try:
        second.wait_for(READY_LINE)
        assert token not in second.output()  # printed on first start only
        status, body = request(second.base, "GET", "/v1/scopes/kept/streams/s", token)
        assert status == 200
        assert body["scalingPolicy"]["minSegments"] == 2
        assert second.stop() == 0
    finally:
        second.kill()


def test_a_taken_port_is_a_clear_error(tmp_path: Path, ports: tuple[int, int]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[0]))
        taken.listen()
        node = Standalone(tmp_path / "data", *ports)
        try:
            assert node.process.wait(120) == 1
        finally:
            node.kill()
    node._reader.join(5)
    assert f"HTTP port 127.0.0.1:{ports[0]} is not free" in node.output()
    assert "--http-port" in node.output()
