"""Outages of the services around a node, made for real: its metadata database and Redis.

Whole processes: a private PostgreSQL server (``initdb`` and ``pg_ctl`` on a loopback port,
run as the ``postgres`` user; skipped with a notice where the machine has none), a
``millrace standalone`` node on it, a writer process and a reader-group reader process
(``e2e_roles``) running throughout. PostgreSQL is stopped with ``pg_ctl stop -m immediate``
for 30 s, then started again. Checked: appends go on being acknowledged; REST, a signed-in
console page and a WebSocket handshake answer 503 ``database-unavailable`` with
``Retry-After``; health names the database alone and stays ready;
no child of the node is restarted; the reader is not evicted; within 10 s of the database's
return REST answers again; every event written is read exactly once. With the test-only
switches ``no-service-503`` and ``no-sync-grace`` the same outage gives 500s and evicts the
reader (its next sync is told it is no longer in the group): the guards are what pass.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.e2e_roles import KEYS_PER_WRITER, spawn
from tests.acceptance.postgres import PrivatePostgres
from tests.acceptance.standalone_node import (
    READY_LINE,
    Standalone,
    eventually,
    free_ports,
    new_stream,
    request,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
OUTAGE_SECONDS = 30.0
WRITE_RATE = 300.0
#: How long the writer goes on once the database is back (at least: it stops at its next
#: thousand events).
AFTER_SECONDS = 8.0


def _get(base: str, path: str, token: str) -> tuple[int, Any, Any]:
    """(status, headers, JSON body) of a GET, as a program with a token makes it."""
    req = urllib.request.Request(base + path, headers={"Authorization": f"Token {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, response.headers, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        return exc.code, exc.headers, body


class Roles:
    """The writer and reader processes of one run."""

    def __init__(self, node: Standalone, scope: str, where: Path) -> None:
        self.node, self.scope, self.where = node, scope, where
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str) -> None:
        self.procs[name] = spawn(self.where, name, *args)

    def written(self) -> int:
        try:
            return int((self.where / "w.json.progress").read_text() or 0)
        except (OSError, ValueError):
            return 0

    def read_lines(self) -> list[str]:
        try:
            return (self.where / "r.log").read_text().splitlines()
        except OSError:
            return []

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def _console_session(node: Standalone) -> Any:
    """An HTTP client signed in to the console as the administrator, as a browser is (the
    login form with its CSRF token, then the session cookie)."""
    import re

    import httpx

    browser = httpx.Client(base_url=node.base, follow_redirects=True, timeout=30)
    form = browser.get("/login/").text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token is not None, form[:500]
    password = (node.data_dir / "admin-password").read_text().strip()
    signed_in = browser.post("/login/", data={"username": "admin", "password": password,
                                              "csrfmiddlewaretoken": token.group(1)})  # fmt: skip
    assert signed_in.status_code == 200 and "/login/" not in str(signed_in.url), signed_in.url
    return browser


def _tail_handshake(node: Standalone) -> int:
    """The HTTP status a WebSocket handshake with a token gets (101: it got in)."""
    import asyncio

    import websockets

    url = node.base.replace("http", "ws", 1) + "/ws/streams/sc/st?from=tail"

    async def connect() -> int:
        headers = {"Authorization": f"Token {node.token}"}
        try:
            async with websockets.connect(url, additional_headers=headers, open_timeout=10):
                return 101
        except websockets.InvalidStatus as exc:
            return int(exc.response.status_code)

    return asyncio.run(connect())


def _outage(node: Standalone, postgres: PrivatePostgres) -> dict[str, Any]:
    """Stop the database for ``OUTAGE_SECONDS`` while REST and health are watched, and the
    console and a WebSocket handshake tried once; what was seen."""
    seen: dict[str, Any] = {"statuses": Counter(), "retry_after": set(), "codes": set(),
                            "health_down": set(), "ready": set()}  # fmt: skip
    browser = _console_session(node)
    assert browser.get("/").status_code == 200
    postgres.stop()
    stopped = time.monotonic()
    page = browser.get("/")
    seen["console"] = (page.status_code, page.headers.get("Retry-After"),
                       "database-unavailable" in page.text)  # fmt: skip
    seen["websocket"] = _tail_handshake(node)
    while time.monotonic() - stopped < OUTAGE_SECONDS:
        status, headers, body = _get(node.base, "/v1/scopes", node.token)
        seen["statuses"][status] += 1
        if isinstance(body, dict):
            seen["codes"].add(body.get("code"))
        seen["retry_after"].add(headers.get("Retry-After"))
        _, health = node.health()
        if isinstance(health, dict):
            seen["health_down"].add(health["details"].get("down", ""))
        ready, _, _ = _get(node.base, "/health/readiness", node.token)
        seen["ready"].add(ready)
        time.sleep(1.0)
    postgres.start()
    returned = time.monotonic()
    eventually(lambda: _get(node.base, "/v1/scopes", node.token)[0] == 200, 10.0,
               "REST answering again after the database returned")  # fmt: skip
    seen["back_after"] = time.monotonic() - returned
    return seen


def _run(tmp_path: Path, postgres: PrivatePostgres, unsafe: str = "") -> dict[str, Any]:
    env = {"MILLRACE_TEST_UNSAFE": unsafe} if unsafe else {}
    node = Standalone(tmp_path / "data", *free_ports(2), services={"DATABASE_URL": postgres.url},
                      env=env)  # fmt: skip
    roles: Roles | None = None
    try:
        node.wait_for(READY_LINE)
        manager, scope = new_stream(node, segments=2)
        manager.create_reader_group(
            scope, "rg", [f"{scope}/st"], reader_timeout_ms=10_000, group_refresh_time_ms=500
        )
        count = int(WRITE_RATE * (OUTAGE_SECONDS + 40))
        roles = Roles(node, scope, tmp_path)
        base, token = node.base, node.token
        roles.start("w", "writer", base, token, scope, "0", str(count), str(WRITE_RATE),
                    str(tmp_path / "w.json"))  # fmt: skip
        roles.start("r", "reader", base, token, scope, "rg", "r0", str(tmp_path / "r.log"))
        eventually(lambda: len(roles.read_lines()) >= 1000, 60.0, "the reader reading")
        restarts = {name: child["restarts"] for name, child in node.supervisor_state().items()}
        before = roles.written()
        seen = _outage(node, postgres)
        after = roles.written()
        seen["written_in_outage"] = after - before
        seen["restarts"] = {
            name: child["restarts"] - restarts[name]
            for name, child in node.supervisor_state().items()
        }
        # Writes go on after the return for AFTER_SECONDS' worth of events, then the writer is
        # told to stop (its count is only the cap, for a machine too slow to get there).
        eventually(lambda: roles.written() >= after + WRITE_RATE * AFTER_SECONDS, 120,
                   "the writer writing on after the outage")  # fmt: skip
        (tmp_path / "w.json.stop").touch()
        assert roles.procs["w"].wait(180) == 0, (tmp_path / "w.stderr").read_text()[-3000:]
        status, answer = request(base, "PUT", f"/v1/scopes/{scope}/streams/st/state", token,
                                 {"streamState": "SEALED"})  # fmt: skip
        assert status == 200, answer
        seen["reader_exit"] = roles.procs["r"].wait(120)
        seen["reader_said"] = (tmp_path / "r.stderr").read_text()[-3000:]
        counts = json.loads((tmp_path / "w.json").read_text())
        written = {f"{key}:{i}" for key, n in counts.items() for i in range(n)}
        assert len(counts) == KEYS_PER_WRITER
        read = Counter(line.split(" ", 3)[3] for line in roles.read_lines() if line[:1] != "#")
        seen["lost"] = len(written - set(read))
        seen["read_twice"] = sum(n - 1 for n in read.values() if n > 1)
        seen["written"] = len(written)
        manager.close()
        return seen
    finally:
        if roles is not None:
            roles.kill_all()
        (tmp_path / "standalone.log").write_text(node.output())
        node.kill()


def test_a_database_outage_is_503_names_the_database_and_costs_nothing(
    tmp_path: Path, postgres: PrivatePostgres
) -> None:
    seen = _run(tmp_path, postgres)
    assert seen["statuses"][503] >= OUTAGE_SECONDS / 3, seen
    assert seen["statuses"][500] == 0, seen
    assert "database-unavailable" in seen["codes"], seen
    assert "5" in seen["retry_after"], seen
    assert seen["health_down"] <= {"database", ""}, seen  # the database alone ("" before/after)
    assert "database" in seen["health_down"], seen
    assert seen["ready"] == {200}, seen  # appends go on: the node stays ready
    assert seen["console"] == (503, "5", True), seen  # a signed-in console page
    assert seen["websocket"] == 503, seen  # a tail's handshake: come back later
    assert seen["written_in_outage"] >= WRITE_RATE * OUTAGE_SECONDS / 2, seen
    assert not any(seen["restarts"].values()), seen
    assert seen["back_after"] < 10.0, seen
    assert seen["reader_exit"] == 0, seen["reader_said"]
    assert seen["lost"] == 0 and seen["read_twice"] == 0, seen


def test_without_the_guards_the_same_outage_gives_500s_and_evicts_the_reader(
    tmp_path: Path, postgres: PrivatePostgres
) -> None:
    seen = _run(tmp_path, postgres, unsafe="no-service-503,no-sync-grace")
    assert seen["statuses"][500] > 0, seen
    assert seen["statuses"][503] == 0, seen
    # Its missed syncs counted: the reader was declared dead, and told so at its next sync.
    assert seen["reader_exit"] != 0, seen
    assert "ReaderNotInGroupError" in seen["reader_said"], seen["reader_said"]


# -- Redis as the broker and the channel layer ---------------------------------------------------


class PrivateRedis:
    """A ``redis-server`` of the test's own on a loopback port, to kill and start again."""

    def __init__(self, binary: str, where: Path) -> None:
        self.binary, self.where = binary, where
        self.port = free_ports(1)[0]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.where)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        eventually(lambda: _answers(self.port), 10.0, "redis-server answering")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server on this machine")
    server = PrivateRedis(binary, tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def _answers(port: int) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(16).startswith(b"+PONG")
    return False


class Tail:
    """A WebSocket tail of a stream, as a program subscribes (a token header, no Origin), on
    a thread of its own: every event's text, and how the connection ended."""

    def __init__(self, node: Standalone, scope: str) -> None:
        import threading

        self.url = node.base.replace("http", "ws", 1) + f"/ws/streams/{scope}/st?from=head"
        self.url += "&encoding=utf-8"
        self.token = node.token
        self.events: list[str] = []
        self.subscribed = threading.Event()
        self.ended: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.subscribed.wait(30), self.ended

    def _run(self) -> None:
        import asyncio

        import websockets

        async def follow() -> None:
            headers = {"Authorization": f"Token {self.token}"}
            async with websockets.connect(self.url, additional_headers=headers) as ws:
                async for raw in ws:
                    message = json.loads(raw)
                    self.subscribed.set()
                    self.events += [e["text"] for e in message.get("events", [])]
                    if message["type"] == "end":
                        return

        try:
            asyncio.run(follow())
            self.ended = "end"
        except Exception as exc:
            self.ended = f"{type(exc).__name__}: {exc}"


def test_on_redis_a_tail_stays_through_its_outage_and_a_scale_asked_meanwhile_runs_once(
    tmp_path: Path, redis_server: PrivateRedis
) -> None:
    """Redis as broker and channel layer: a tail is connected for the whole run (about 60 s),
    idle for the first 25 s (redis-py's 5 s socket timeout against the channel layer's 5 s
    blocking pop once dropped every tail after 5 s; tails now take no channel layer); Redis
    is SIGKILLed for 20 s while events are written and a scale is asked (503
    ``broker-unavailable``, the scale recorded); once Redis is back
    the node is UP within 15 s, the scale runs exactly once (a repeat of it is answered with
    the same scale), and the tail has every event exactly once."""
    node = Standalone(tmp_path / "data", *free_ports(2), services={"REDIS_URL": redis_server.url})
    try:
        node.wait_for(READY_LINE)
        manager, scope = new_stream(node, segments=1)
        tail = Tail(node, scope)
        path = f"/v1/scopes/{scope}/streams/st"

        def write(name: str) -> list[str]:
            events = [f"{name}{i}" for i in range(50)]
            with manager.create_writer(scope, "st") as writer:
                for event in events:
                    writer.write_event(event)
            return events

        written = write("a")
        time.sleep(25)  # idle: past five of the channel layer's blocking pops
        redis_server.kill()
        killed = time.monotonic()
        written += write("b")  # appends need no Redis
        segment = request(node.base, "GET", f"{path}/segments", node.token)[1]["segments"][0]
        scale = {"sealedSegments": [segment["segmentId"]], "newRanges": [[0, 0.5], [0.5, 1]]}
        status, answer = request(node.base, "POST", f"{path}/scale", node.token, scale)
        assert (status, answer["code"]) == (503, "broker-unavailable"), answer
        node.wait_health(up=False, naming="broker", timeout=15)
        time.sleep(max(0.0, 20 - (time.monotonic() - killed)))
        redis_server.start()
        back = time.monotonic()
        node.wait_health(up=True, timeout=15)
        assert time.monotonic() - back < 15

        def scaled() -> Any:
            found = request(node.base, "GET", f"{path}/segments", node.token)[1]["segments"]
            return found if len(found) == 2 else None

        eventually(scaled, 30.0, "the scale asked while Redis was away")
        status, again = request(node.base, "POST", f"{path}/scale", node.token, scale)
        assert status == 200 and again["epoch"] == 1, again  # the same scale, not a second
        written += write("c")
        status, answer = request(node.base, "PUT", f"{path}/state", node.token,
                                 {"streamState": "SEALED"})  # fmt: skip
        assert status == 200, answer
        tail.thread.join(60)
        assert tail.ended == "end", tail.ended  # connected throughout, to the stream's end
        assert sorted(tail.events) == sorted(written), "lost or repeated events"
        manager.close()
    finally:
        (tmp_path / "standalone.log").write_text(node.output())
        node.kill()
