"""Credentials that rotate, on a real node: the delegation-token secret rotated with
``millrace token secret rotate`` while a writer and a reader run for more than three token
lifetimes (nothing fails; with the overlap switched off, the reader is refused), and API tokens
that expire, rotate and are revoked through ``millrace token``."""

from __future__ import annotations

import base64
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from millrace.kernel.claims import parse_keyring
from millrace.kernel.config import SegmentStoreSettings
from tests.acceptance.standalone_node import Standalone, request, running_standalone

pytestmark = pytest.mark.slow

#: The delegation tokens' lifetime on these nodes (the shortest the setting takes is 2 s).
TOKEN_TTL_S = 3


def node_env(node: Standalone) -> dict[str, str]:
    """The environment the node's own commands run in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_")}
    env.update({k: v for k, v in node.environ.items() if k.startswith("MILLRACE_")})
    env["MILLRACE_DATA_DIR"] = str(node.data_dir)
    return env


def cli(node: Standalone, *args: str) -> subprocess.CompletedProcess[str]:
    env = node_env(node)
    return subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", *args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module", params=["overlap", "no-token-overlap"])
def node(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Standalone]:
    env = {"MILLRACE_TOKEN_TTL_SECONDS": str(TOKEN_TTL_S), "MILLRACE_API_TOKEN_TTL_DAYS": "1"}
    if request.param != "overlap":
        env["MILLRACE_TEST_UNSAFE"] = request.param
    yield from running_standalone(tmp_path_factory, "credentials", env)


def test_the_token_secret_rotates_under_load_with_no_error(node: Standalone) -> None:
    """A writer and a reader run for more than three token lifetimes; the secret is rotated
    after one. The overlap keeps the tokens signed before the rotation valid until they run
    out, then the clients' fresh tokens are signed with the new secret. With the overlap
    switched off the reader's next request is refused: this test then fails."""
    overlap = "no-token-overlap" not in node.environ.get("MILLRACE_TEST_UNSAFE", "")
    scope = f"rot{uuid.uuid4().hex[:8]}"
    errors: list[BaseException] = []
    written: list[int] = []
    seen: list[bytes] = []
    stop = threading.Event()
    with node.manager() as manager:
        manager.create_scope(scope)
        manager.create_stream(scope, "st", initial_segments=2)

        def write() -> None:
            try:
                writer = manager.create_writer(scope, "st")
                n = 0
                while not stop.is_set():
                    writer.write_event(f"e{n}", routing_key=f"k{n % 3}")
                    writer.flush()
                    written.append(n)
                    n += 1
                    time.sleep(0.01)
                writer.close()
            except BaseException as exc:
                errors.append(exc)

        def read() -> None:
            try:
                reader = manager.create_reader(scope, "st")
                while not stop.is_set() or len(seen) < len(written):
                    event = reader.read_next(timeout=0.5)
                    if event is not None:
                        seen.append(event.data)
                    elif stop.is_set():
                        break
                reader.close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write), threading.Thread(target=read)]
        for thread in threads:
            thread.start()
        time.sleep(TOKEN_TTL_S)
        asked = time.time()
        rotated = cli(node, "token", "secret", "rotate", "--overlap", str(2 * TOKEN_TTL_S))
        assert rotated.returncode == 0, rotated.stderr
        shown = cli(node, "token", "secret", "show").stdout
        # A loaded machine can take longer than the overlap to start the two commands; then the
        # retiring secret is rightly no longer shown, and the keyring file is looked at instead.
        shown_in_time = time.time() < asked + 2 * TOKEN_TTL_S
        keyring = SegmentStoreSettings.from_env(node_env(node)).token_keyring
        assert keyring is not None
        _, retiring = parse_keyring(keyring.read_text())
        time.sleep(3 * TOKEN_TTL_S + 1)
        stop.set()
        for thread in threads:
            thread.join(60)
    if overlap:
        assert not errors, errors
        assert len(written) > 100
        assert sorted(seen) == sorted(f"e{n}".encode() for n in written)
        assert "signing" in shown
        if shown_in_time:
            assert "retiring" in shown  # the old one, until its time
        [(_, until)] = retiring
        assert asked + 2 * TOKEN_TTL_S <= until <= time.time()
    else:
        assert errors, "the reader went on with a secret retired at once: the overlap is moot"
        assert "signature matches no current token secret" in str(errors[0])


def test_api_tokens_list_rotate_revoke_and_expire(node: Standalone) -> None:
    if "no-token-overlap" in node.environ.get("MILLRACE_TEST_UNSAFE", ""):
        pytest.skip("(one run is enough)")
    made = cli(node, "user", "create", "dora", "--role", "viewer")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    assert request(node.base, "GET", "/v1/scopes", token)[0] == 200
    listed = cli(node, "token", "list")
    assert "dora" in listed.stdout and f"{token[:6]}…" in listed.stdout
    assert "expires" in listed.stdout and "never" not in listed.stdout.split("dora")[1]

    rotated = cli(node, "token", "rotate", "dora")
    assert rotated.returncode == 0
    new = rotated.stdout.strip()
    assert new != token
    status, body = request(node.base, "GET", "/v1/scopes", token)
    assert status == 401 and "revoked, rotated or mistyped" in body["message"]
    assert request(node.base, "GET", "/v1/scopes", new)[0] == 200

    assert cli(node, "token", "revoke", "dora").returncode == 0
    assert request(node.base, "GET", "/v1/scopes", new)[0] == 401
    again = cli(node, "token", "revoke", "dora")
    assert again.returncode == 2 and "has no API token" in again.stderr

    # a token older than MILLRACE_API_TOKEN_TTL_DAYS is refused, saying why and what to do
    age_token(node, "admin", days=2)
    status, body = request(node.base, "GET", "/v1/scopes", node.token)
    assert status == 401 and "expired on" in body["message"]
    assert "millrace token rotate admin" in body["message"]
    refused_cli = cli(node, "scope", "list", "--url", node.base)  # the error names the file
    assert refused_cli.returncode == 1 and str(node.data_dir / "admin-token") in refused_cli.stderr
    fresh = cli(node, "token", "rotate", "admin").stdout.strip()
    assert request(node.base, "GET", "/v1/scopes", fresh)[0] == 200
    # The data directory's admin-token held the old token: it holds the new one now, so the
    # local commands go on working.
    assert (node.data_dir / "admin-token").read_text().strip() == fresh
    assert stat.S_IMODE((node.data_dir / "admin-token").stat().st_mode) == 0o600
    assert cli(node, "scope", "list", "--url", node.base).returncode == 0
    refused = query(node, "SELECT detail FROM controller_app_auditentry WHERE result = "
                          "'refused' AND action = 'GET /v1/scopes'")  # fmt: skip
    assert any("expired on" in detail for (detail,) in refused)
    assert any("revoked, rotated or mistyped" in detail for (detail,) in refused)


def test_users_change_role_password_and_state_and_the_last_admin_stays(node: Standalone) -> None:
    """``millrace user role|password|disable|enable|delete|list`` against a running node, each
    checked by the REST API as a program calls it (a token, or Basic with the password)."""
    if "no-token-overlap" in node.environ.get("MILLRACE_TEST_UNSAFE", ""):
        pytest.skip("(one run is enough)")
    name = f"erin{uuid.uuid4().hex[:4]}"
    token = cli(node, "user", "create", name, "--role", "operator").stdout.strip().splitlines()[-1]
    scope = {"scopeName": f"s{uuid.uuid4().hex[:6]}"}
    assert request(node.base, "POST", "/v1/scopes", token, scope)[0] == 201
    assert cli(node, "user", "role", name, "viewer").returncode == 0
    assert request(node.base, "POST", "/v1/scopes", token, {"scopeName": "x" + name})[0] == 403
    assert request(node.base, "GET", "/v1/scopes", token)[0] == 200
    assert cli(node, "user", "disable", name).returncode == 0
    assert request(node.base, "GET", "/v1/scopes", token)[0] == 401
    listed = cli(node, "user", "list").stdout
    assert any(line.split()[:3] == [name, "viewer", "disabled"] for line in listed.splitlines())
    assert cli(node, "user", "enable", name).returncode == 0
    assert request(node.base, "GET", "/v1/scopes", token)[0] == 200
    password = cli(node, "user", "password", name).stdout.strip().rsplit(" ", 1)[-1]
    basic = base64.b64encode(f"{name}:{password}".encode()).decode()
    asked = urllib.request.Request(
        node.base + "/v1/scopes", headers={"Authorization": f"Basic {basic}"}
    )
    with urllib.request.urlopen(asked, timeout=30) as answer:
        assert answer.status == 200
    # the last active administrator cannot be demoted, disabled or deleted
    for change in (("role", "admin", "viewer"), ("disable", "admin"), ("delete", "admin")):
        refused = cli(node, "user", *change)
        assert refused.returncode == 2 and "last active administrator" in refused.stderr
    assert cli(node, "user", "delete", name).returncode == 0
    assert request(node.base, "GET", "/v1/scopes", token)[0] == 401
    gone = cli(node, "user", "delete", name)
    assert gone.returncode == 2 and f"no user {name!r}" in gone.stderr
    database = sqlite3.connect(node.data_dir / "millrace.sqlite3")
    rows = database.execute("SELECT action FROM controller_app_auditentry WHERE object=?", (name,))
    changes = {"user.role", "user.disable", "user.enable", "user.password", "user.delete"}
    assert changes <= {row[0] for row in rows}


def age_token(node: Standalone, user: str, days: int) -> None:
    """Make ``user``'s API token ``days`` old, in the node's database (as time would)."""
    query(
        node,
        "UPDATE authtoken_token SET created = datetime('now', ?) WHERE user_id = "
        "(SELECT id FROM auth_user WHERE username = ?)",
        (f"-{days} days", user),
    )


def query(node: Standalone, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Rows of ``sql`` on the node's metadata database (SQLite, its embedded default)."""
    with sqlite3.connect(node.data_dir / "millrace.sqlite3") as db:
        return db.execute(sql, args).fetchall()
