"""``millrace standalone`` as a user runs it: one command, a whole node, clean stop, restart.

The command runs in a subprocess on embedded defaults (``DATABASE_URL`` and ``REDIS_URL``
removed: SQLite, filesystem broker, file tier-1, filesystem tier-2) with a fresh data
directory and free ports. The test goes through what a user sees: the printed endpoints, the
administrator's token file, the REST API with and without it, a child process killed with
SIGKILL and brought back, a clean stop on SIGTERM that leaves no process behind, and a restart
that keeps the streams, their events, reader groups and open transactions.
"""

from __future__ import annotations

import os
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.standalone_node import READY_LINE, Standalone, free_ports, request


@pytest.fixture
def ports() -> tuple[int, int]:
    http, wire = free_ports(2)
    return http, wire


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
    assert token not in out  # printed on first start only to a terminal (this is a pipe)
    assert "the admin's token and password are in the files above" in out

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


def test_restart_keeps_streams_events_reader_groups_and_transactions(
    tmp_path: Path, ports: tuple[int, int]
) -> None:
    first = Standalone(tmp_path / "data", *ports)
    try:
        first.wait_for(READY_LINE)
        token = first.token
        assert request(first.base, "POST", "/v1/scopes", token, {"scopeName": "kept"})[0] == 201
        body = {
            "streamName": "s",
            "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2},
        }
        assert request(first.base, "POST", "/v1/scopes/kept/streams", token, body)[0] == 201
        events = {"events": [{"data": f"e{i}", "routingKey": "k"} for i in range(20)]}
        base = "/v1/scopes/kept/streams/s"
        assert request(first.base, "POST", f"{base}/events", token, events)[0] == 201
        group = {"readerGroupName": "g", "streams": {"kept/s": "head"}}
        assert request(first.base, "POST", "/v1/scopes/kept/readergroups", token, group)[0] == 201
        rg = "/v1/scopes/kept/readergroups/g"
        assert request(first.base, "POST", f"{rg}/readers", token, {"readerId": "r"})[0] == 201
        status, answer = request(first.base, "POST", f"{rg}/readers/r/sync", token,
                                 {"generation": 0})  # fmt: skip
        assert status == 200 and len(answer["acquired"]) == 2, answer
        moved = {answer["acquired"][0]["key"]: 0}
        request(first.base, "POST", f"{rg}/readers/r/sync", token,
                {"generation": 0, "positions": moved})  # fmt: skip
        status, txn = request(
            first.base, "POST", f"{base}/transactions", token, {"leaseMs": 600_000}
        )
        assert status == 201, txn
        assert first.stop() == 0
    finally:
        first.kill()
    second = Standalone(tmp_path / "data", *ports)
    try:
        second.wait_for(READY_LINE)
        assert token not in second.output()  # printed on first start only
        status, body = request(second.base, "GET", f"{base}", token)
        assert status == 200
        assert body["scalingPolicy"]["minSegments"] == 2
        status, page = request(second.base, "GET", f"{base}/events?limit=100", token)
        assert [e["data"] for e in page["events"]] == [f"e{i}" for i in range(20)]
        status, kept = request(second.base, "GET", rg, token)
        assert status == 200 and kept["onlineReaderIds"] == ["r"]
        assert sorted(kept["readers"][0]["segments"]) == sorted(
            a["key"] for a in answer["acquired"]
        )
        status, open_txn = request(second.base, "GET", f"{base}/transactions/{txn['txnId']}", token)
        assert (status, open_txn["state"]) == (200, "OPEN")
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


#: What the first minutes of a node once printed over and over, or on every start, although
#: the user can do nothing about it: the supervisor's liveness probe (a line a second), beat
#: sending a job and a worker receiving and finishing it (every few seconds), WhiteNoise's
#: missing static folder, Celery's warning about pickle for a root worker, every request and
#: 4xx answer, kombu's warning about a broker URL without a host, Celery's start banners.
NOISE = (
    "GET /health", "Sending due task", "] received", "] succeeded in", "No directory at",
    "superuser privileges", "HTTP/1.1", "WebSocket /ws", "connection open", "Not Found:",
    "Unauthorized:", "Bad Request:", "No hostname was supplied", "-------------- celery@",
    "celery beat v",
)  # fmt: skip


def test_a_quiet_first_minute(tmp_path: Path, ports: tuple[int, int]) -> None:
    """A node that runs and is used (requests with a token, a WebSocket tail with the token
    in its URL, answers 404 and 401) shows its start and nothing every
    second, no request line and no 4xx warning, and no credential: neither the admin's token
    and password nor the secret key is in any line it printed or any log file it wrote. With
    ``MILLRACE_LOG_LEVEL=DEBUG`` the routine lines are there (so the quiet is the level's
    doing, not lines that were never logged)."""
    from websockets.sync.client import connect

    data = tmp_path / "quiet"
    quiet = Standalone(data, *ports)
    try:
        quiet.wait_for(READY_LINE)
        token = (data / "admin-token").read_text().strip()
        password = (data / "admin-password").read_text().strip()
        assert request(quiet.base, "POST", "/v1/scopes", token, {"scopeName": "q"})[0] == 201
        assert request(quiet.base, "GET", "/v1/scopes/nosuch", token)[0] == 404
        assert request(quiet.base, "GET", "/v1/scopes", "wrong-" + token)[0] == 401
        body = {
            "streamName": "s",
            "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1},
        }
        assert request(quiet.base, "POST", "/v1/scopes/q/streams", token, body)[0] == 201
        url = f"ws://127.0.0.1:{ports[0]}/ws/streams/q/s?from=head&token={token}"
        with connect(url, open_timeout=30) as tail:
            tail.ping().wait(10)
        time.sleep(20)  # the sweeper (15 s), transaction timeouts and watermarks (10 s) ran
        lines = quiet.output().splitlines()
        noisy = [line for line in lines if any(noise in line for noise in NOISE)]
        assert not noisy, "\n".join(noisy[:20])
        logs = [quiet.output()] + [
            path.read_text(errors="replace") for path in data.rglob("*.log") if path.is_file()
        ]  # fmt: skip
        keys = [path.read_text().strip() for path in (data / "secrets").iterdir()]
        keys += [quiet.environ[name] for name in ("MILLRACE_SECRET_KEY", "MILLRACE_TOKEN_SECRET")
                 if quiet.environ.get(name)]  # fmt: skip
        assert len(keys) >= 2  # Django's secret key, the delegation tokens' secret
        for secret in (token, password, *keys):
            assert not any(secret in text for text in logs), "a credential was logged"
        assert quiet.stop() == 0
    finally:
        quiet.kill()
    http, wire = free_ports(2)
    loud = Standalone(tmp_path / "loud", http, wire, env={"MILLRACE_LOG_LEVEL": "DEBUG"})
    try:
        loud.wait_for(READY_LINE)
        loud.wait_for("Sending due task", timeout=30)
        loud.wait_for("GET /health/liveness", timeout=30)
    finally:
        loud.kill()


def test_json_logs_for_machines(tmp_path: Path, ports: tuple[int, int]) -> None:
    """With ``MILLRACE_LOG_FORMAT=json`` every log line of the node's processes is one JSON
    object naming its child process (what the supervisor prints for people, its banner and
    the token on first start, stays text)."""
    import json

    node = Standalone(tmp_path / "data", *ports, env={"MILLRACE_LOG_FORMAT": "json"})
    try:
        node.wait_for(READY_LINE)
        node.wait_for('"level"', timeout=30)
        records = [json.loads(line) for line in node.output().splitlines() if line.startswith("{")]
        assert records
        assert all({"time", "level", "logger", "message", "child"} <= set(r) for r in records)
        loggers = {r["logger"].split(".")[0] for r in records}
        assert loggers & {"segment_app", "uvicorn", "celery", "millrace", "controller_app"}
        text_logs = [line for line in node.output().splitlines() if " INFO " in line]
        assert not text_logs, text_logs[:5]
    finally:
        node.kill()
