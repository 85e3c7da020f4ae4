"""Grants on every face: users with different grants against a ``millrace standalone`` node, as
their real clients call it: REST with an API token (urllib, no cookie), the WebSocket tail
(``websockets``), the Python client over the wire, Pravega's official client over gRPC with a
user name and password, key-value tables over REST, a Spark job (``millrace ingest``) and the
console in Chromium.

The team: ``alice`` writes ``ta/orders`` (READ_UPDATE on it) and the table ``ta/tab``, and is
denied ``ta/secret`` although her grant pattern covers it; ``rob`` reads ``ta/orders`` (READ)
through reader groups of his own (READ_UPDATE on ``prn::/scope:ta/reader-group:*``), never
with READ_UPDATE on the stream (Pravega's trap); ``olga`` manages another team's scopes
(``prn::/scope:tb*``) only. Each allowed call works; each refused one is refused naming the
resource, and audited. On a second node with the check switched off (TEST-ONLY ``no-grants``)
the same refused calls go through: the test shows the guard.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import Standalone, request, running_standalone
from tests.console.conftest import CHROMIUM, CHROMIUM_ARGS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROGRAMS = Path(__file__).parent / "pravega_programs"
EVENTS = 20


@dataclass
class User:
    name: str
    password: str
    token: str


@pytest.fixture(scope="module", params=["guarded", "unguarded"])
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    env = {} if request.param == "guarded" else {"MILLRACE_TEST_UNSAFE": "no-grants"}
    yield from running_standalone(tmp_path_factory, f"grants-{request.param}", env)


@pytest.fixture(scope="module")
def team(node: Standalone) -> dict[str, User]:
    """The three users, made and granted with ``millrace user`` and ``millrace acl`` on the
    node's host; the admin makes ``ta/orders`` (with events), ``ta/secret`` and ``ta/tab``."""
    users = {}
    for name in ("alice", "rob", "olga"):
        lines = node.cli("user", "create", name, "--role", "viewer").stdout.strip().splitlines()
        users[name] = User(name, lines[0].rpartition(": ")[2], lines[-1])
    for args in (
        ("grant", "user:alice", "READ_UPDATE", "prn::/scope:ta/stream:*"),
        ("deny", "user:alice", "READ", "prn::/scope:ta/stream:secret"),
        ("grant", "user:alice", "READ_UPDATE", "prn::/scope:ta/key-value-table:tab"),
        ("grant", "user:rob", "READ", "prn::/scope:ta/stream:orders"),
        ("grant", "user:rob", "READ_UPDATE", "prn::/scope:ta/reader-group:*"),
        ("grant", "user:olga", "MANAGE", "prn::/scope:tb*"),
    ):
        node.cli("acl", *args)
    admin = node.manager()
    admin.create_scope("ta")
    admin.create_stream("ta", "orders", initial_segments=2)
    admin.create_stream("ta", "secret", initial_segments=1)
    with admin.create_writer("ta", "orders") as writer:
        for i in range(EVENTS):
            writer.write_event(f"e{i}", routing_key=f"k{i % 4}")
    admin.close()
    body = {"kvtName": "tab", "partitionCount": 1, "primaryKeyLength": 4}
    assert request(node.base, "POST", "/v1/scopes/ta/kvtables", node.token, body)[0] == 201
    return users


def _through(status: int, body: Any, resource: str) -> bool:
    """True for an answer that did it, False for a refusal naming ``resource``."""
    if status < 300:
        return True
    assert status == 403, (status, body)
    assert body["code"] == "permission-denied" and resource in body["message"], body
    return False


# -- the faces ----------------------------------------------------------------------------------


def rest(node: Standalone, team: dict[str, User]) -> dict[str, bool]:
    """Whether each REST call went through (True) or was refused naming its resource."""
    base, append = node.base, {"events": [{"data": "x", "routingKey": "k"}]}
    orders, secret = "prn::/scope:ta/stream:orders", "prn::/scope:ta/stream:secret"
    found = {}
    status, body = request(base, "POST", "/v1/scopes/ta/streams/orders/events",
                           team["alice"].token, append)  # fmt: skip
    found["alice appends"] = _through(status, body, orders)
    status, body = request(base, "POST", "/v1/scopes/ta/streams/orders/events",
                           team["rob"].token, append)  # fmt: skip
    found["rob appends"] = _through(status, body, orders)
    status, body = request(base, "GET", "/v1/scopes/ta/streams/orders/events?from=head",
                           team["rob"].token)  # fmt: skip
    found["rob reads"] = status == 200
    status, body = request(base, "GET", "/v1/scopes/ta/streams/orders", team["olga"].token)
    found["olga reads"] = _through(status, body, orders)
    status, body = request(base, "GET", "/v1/scopes/ta/streams/secret", team["alice"].token)
    found["alice reads the denied stream"] = _through(status, body, secret)
    status, body = request(base, "GET", "/v1/scopes", team["olga"].token)
    found["olga lists ta"] = "ta" in {s["scopeName"] for s in body["scopes"]}
    status, body = request(base, "POST", "/v1/scopes", team["olga"].token, {"scopeName": "tb-x"})
    found["olga makes her scope"] = status == 201
    status, body = request(base, "POST", "/v1/scopes", team["olga"].token, {"scopeName": "tc"})
    found["olga makes another team's scope"] = _through(status, body, "prn::/scope:tc")
    return found


def kvt(node: Standalone, team: dict[str, User]) -> dict[str, bool]:
    table, path = "prn::/scope:ta/key-value-table:tab", "/v1/scopes/ta/kvtables/tab/entries/k001"
    status, _ = request(node.base, "PUT", path, team["alice"].token, {"value": "v"})
    found = {"alice puts a table entry": status == 200}
    status, body = request(node.base, "PUT", path, team["rob"].token, {"value": "v"})
    found["rob puts a table entry"] = _through(status, body, table)
    return found


def tail(node: Standalone, user: User) -> bool:
    """Whether ``user``'s WebSocket tail of ``ta/orders`` from its head got its events."""
    import websockets

    async def run() -> bool:
        url = node.base.replace("http", "ws") + "/ws/streams/ta/orders?from=head"
        headers = {"Authorization": f"Token {user.token}"}
        async with websockets.connect(url, additional_headers=headers, open_timeout=10) as ws:
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 20))
                if message["type"] == "error":
                    assert message["code"] == "permission-denied", message
                    assert "prn::/scope:ta/stream:orders" in message["message"], message
                    return False
                if message["type"] == "events":
                    return True

    return asyncio.run(run())


def python_client(node: Standalone, team: dict[str, User]) -> dict[str, bool]:
    """The Python client over the wire: delegation tokens carry what the grants allow."""
    found = {}
    alice = StreamManager(node.base, token=team["alice"].token)
    with alice.create_writer("ta", "orders", delivery_timeout_s=10) as writer:
        writer.write_event("from alice", routing_key="k1")
    found["alice writes"] = True
    alice.close()
    rob = StreamManager(node.base, token=team["rob"].token)
    try:
        with rob.create_writer("ta", "orders", delivery_timeout_s=5) as writer:
            writer.write_event("from rob", routing_key="k1")
        found["rob writes"] = True
    except Exception as exc:  # (refused by the segment store: a READ token)
        assert "orders" in str(exc) or "token" in str(exc).lower(), exc
        found["rob writes"] = False
    group = rob.create_reader_group("ta", f"g{uuid.uuid4().hex[:6]}", ["ta/orders"])
    member, seen = group.create_reader("r1"), 0
    while member.read_next(timeout=10) is not None:
        seen += 1
    found["rob reads everything through his group"] = seen >= EVENTS
    rob.close()
    olga = StreamManager(node.base, token=team["olga"].token)
    try:
        olga.create_reader_group("ta", "olgas", ["ta/orders"])
        found["olga reads through a group"] = True
    except Exception as exc:
        assert "prn::/scope:ta" in str(exc), exc
        found["olga reads through a group"] = False
    olga.close()
    return found


def pravega(node: Standalone, user: User, *args: str) -> dict[str, Any]:
    """Pravega's own client, with the user's name and password (``Basic``)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("pravega_client_")}
    environ |= {"pravega_client_auth_method": "Basic",
                "pravega_client_auth_username": user.name,
                "pravega_client_auth_password": user.password}  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(PROGRAMS / "grants.py"), f"tcp://127.0.0.1:{node.grpc_port}", *args],
        env=environ, capture_output=True, text=True, timeout=240, cwd=PROGRAMS,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def grpc_face(node: Standalone, team: dict[str, User]) -> dict[str, bool]:
    found = {"alice writes over gRPC": pravega(node, team["alice"], "write", "ta", "orders")["ok"]}
    read = pravega(node, team["rob"], "read", "ta", "orders", "pravegas", str(EVENTS))
    found["rob reads over gRPC"] = read["ok"] and read["events"] >= EVENTS
    wrote = pravega(node, team["olga"], "write", "ta", "orders")
    found["olga writes over gRPC"] = wrote["ok"]
    return found


def spark(node: Standalone, user: User, where: Path) -> bool:
    """Whether ``millrace ingest`` (a Spark job) with ``user``'s token wrote into ta/orders."""
    rows = where / "rows.json"
    rows.write_text("".join(json.dumps({"key": f"k{i}", "event": f"s{i}"}) + "\n"
                            for i in range(5)))  # fmt: skip
    done = node.cli("ingest", str(rows), "--format", "json", "--stream", "ta/orders",
                    "--key-column", "key", "--event-column", "event", "--url", node.base,
                    "--token", user.token, check=False)  # fmt: skip
    if done.returncode != 0:
        assert "prn::/scope:ta/stream:orders" in done.stderr, done.stderr[-3000:]
    return done.returncode == 0


def console(node: Standalone, team: dict[str, User]) -> dict[str, bool]:
    """Chromium: what olga's and alice's consoles show of team a."""
    from playwright.sync_api import sync_playwright

    found = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for name in ("olga", "alice"):
            page = browser.new_page()
            page.set_default_timeout(30_000)
            page.goto(node.base + "/login/")
            page.fill("#id_username", name)
            page.fill("#id_password", team[name].password)
            page.click("button[type=submit]")
            page.wait_for_load_state()
            page.goto(node.base + "/scopes/")
            listed = page.locator("[data-scope='ta']").count() > 0
            if name == "olga":
                found["olga's console lists ta"] = listed
                answer = page.goto(node.base + "/scopes/ta/streams/orders/")
                assert answer is not None
                if answer.status == 403:
                    assert "prn::/scope:ta/stream:orders" in page.content()
                found["olga's console opens ta/orders"] = answer.status == 200
            else:
                found["alice's console lists ta"] = listed
                page.goto(node.base + "/scopes/ta/streams/")
                found["alice's console lists the denied stream"] = (
                    page.locator("a:has-text('secret')").count() > 0
                )
            page.close()
        browser.close()
    return found


#: What each call should do where the grants are checked.
EXPECTED = {
    "alice appends": True, "rob appends": False, "rob reads": True, "olga reads": False,
    "alice reads the denied stream": False, "olga lists ta": False, "olga makes her scope": True,
    "olga makes another team's scope": False,
    "alice puts a table entry": True, "rob puts a table entry": False,
    "rob tails": True, "olga tails": False,
    "alice writes": True, "rob writes": False, "rob reads everything through his group": True,
    "olga reads through a group": False,
    "alice writes over gRPC": True, "rob reads over gRPC": True, "olga writes over gRPC": False,
    "olga's Spark job writes": False,
    "olga's console lists ta": False, "olga's console opens ta/orders": False,
    "alice's console lists ta": True, "alice's console lists the denied stream": False,
}  # fmt: skip


def _refusals(node: Standalone) -> set[tuple[str, str, str]]:
    """(user, source, object) of the refusals in the node's audit log."""
    with sqlite3.connect(node.data_dir / "millrace.sqlite3") as db:
        rows = db.execute("SELECT username, source, object FROM controller_app_auditentry "
                          "WHERE result = 'refused'").fetchall()  # fmt: skip
    return {tuple(row) for row in rows}


def test_each_face_allows_what_is_granted_and_refuses_the_rest(
    node: Standalone, team: dict[str, User], tmp_path: Path
) -> None:
    found = rest(node, team) | kvt(node, team)
    found["rob tails"] = tail(node, team["rob"])
    found["olga tails"] = tail(node, team["olga"])
    found |= python_client(node, team)
    found |= grpc_face(node, team)
    found["olga's Spark job writes"] = spark(node, team["olga"], tmp_path)
    found |= console(node, team)
    assert set(found) == set(EXPECTED)
    guarded = "no-grants" not in node.environ.get("MILLRACE_TEST_UNSAFE", "")
    if guarded:
        assert found == EXPECTED
        refused = _refusals(node)
        sources = {source for user, source, _ in refused if user in team}
        assert {"rest", "websocket", "grpc", "console"} <= sources, refused
        assert ("olga", "websocket", "prn::/scope:ta/stream:orders") in refused
        assert ("olga", "grpc", "prn::/scope:ta/stream:orders") in refused
    else:  # the guard switched off: every refused call goes through
        assert all(found.values()), {k: v for k, v in found.items() if not v}
