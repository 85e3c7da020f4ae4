"""The ``scope`` and ``stream`` commands against a real standalone node, as a user types them.

Create a scope and a stream, append events from arguments and from standard input, follow the
stream with ``stream read`` (the WebSocket tail read, through the ``websockets`` client) while
it is scaled, seal it, and check the errors a user gets for bad input and missing credentials.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from tests.acceptance.standalone_node import Standalone


def millrace(standalone: Standalone, *args: str, stdin: str = "", token: bool = True):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["MILLRACE_URL"] = standalone.base
    env["MILLRACE_DATA_DIR"] = str(standalone.data_dir) if token else "/nonexistent"
    return subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", *args], input=stdin, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_everyday_commands(standalone: Standalone) -> None:
    sc = f"cli{uuid.uuid4().hex[:8]}"
    name = f"{sc}/orders"
    assert ok(millrace(standalone, "scope", "create", sc)).strip() == f"created {sc}"
    assert sc in ok(millrace(standalone, "scope", "list")).split()
    ok(millrace(standalone, "stream", "create", name, "--segments", "2", "--tag", "demo"))
    # Run again (a newcomer re-runs a snippet), a create says so and succeeds, as Pravega's
    # createScope and createStream answer false.
    assert ok(millrace(standalone, "scope", "create", sc)).strip() == f"{sc} exists already"
    again = ok(millrace(standalone, "stream", "create", name, "--segments", "2"))
    assert again.strip() == f"{name} exists already (active; nothing changed)"
    assert ok(millrace(standalone, "stream", "list", sc)).split() == ["orders"]
    info = json.loads(ok(millrace(standalone, "stream", "info", name, "--json")))
    assert (info["state"], info["currentEpoch"], len(info["segments"])) == ("ACTIVE", 0, 2)

    ok(millrace(standalone, "stream", "append", name, "--key", "k", "first", "second"))
    lines = "\n".join(f"line-{i}" for i in range(300)) + "\n"
    assert "appended 300" in ok(millrace(standalone, "stream", "append", name, "--key", "k",
                                         stdin=lines))  # fmt: skip
    upper = next(s for s in info["segments"] if s["keyStart"] == 0.5)["segmentId"]
    scaled = millrace(standalone, "stream", "scale", name, "--seal", str(upper),
                      "--ranges", "0.5-0.75,0.75-1.0")  # fmt: skip
    assert "epoch 1: 3 segment(s)" in ok(scaled)
    ok(millrace(standalone, "stream", "append", name, "--key", "k", "after-scale"))
    rekeyed = json.loads(ok(millrace(standalone, "stream", "rekey", name, "--json")))
    assert rekeyed["epoch"] == 3  # merged into one, then split back
    ranges = sorted((s["keyStart"], s["keyEnd"]) for s in rekeyed["segments"])
    assert ranges == [(0.0, 0.5), (0.5, 0.75), (0.75, 1.0)]
    ok(millrace(standalone, "stream", "append", name, "--key", "other", "after-rekey"))

    read = ok(millrace(standalone, "stream", "read", name, "--from", "head", "--limit", "304"))
    expected = ["first", "second", *[f"line-{i}" for i in range(300)], "after-scale", "after-rekey"]
    assert read.splitlines() == expected  # one key: the order it was written, across the scale

    assert ok(millrace(standalone, "stream", "seal", name)).strip() == "sealed"
    ended = ok(millrace(standalone, "stream", "read", name, "--from", "head"))  # ends at the seal
    assert ended.splitlines() == expected


def test_clear_errors(standalone: Standalone) -> None:
    bad = millrace(standalone, "stream", "info", "no-slash")
    assert bad.returncode == 1 and "expected SCOPE/STREAM" in bad.stderr
    missing = millrace(standalone, "stream", "info", "nosuch/stream")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr
    no_token = millrace(standalone, "scope", "list", token=False)
    assert no_token.returncode == 1 and "no API token" in no_token.stderr
    wrong = millrace(standalone, "scope", "list", "--token", "wrong")
    assert wrong.returncode == 1 and "authentication-failed" in wrong.stderr
    ranges = millrace(standalone, "stream", "scale", "a/b", "--seal", "1", "--ranges", "x")
    assert ranges.returncode == 1 and "START-END" in ranges.stderr


def test_readergroup_commands(standalone: Standalone) -> None:
    sc = f"rg{uuid.uuid4().hex[:8]}"
    ok(millrace(standalone, "scope", "create", sc))
    ok(millrace(standalone, "stream", "create", f"{sc}/st", "--segments", "2"))
    events = "\n".join(f"e{i}" for i in range(50)) + "\n"
    ok(millrace(standalone, "stream", "append", f"{sc}/st", "--key", "k", stdin=events))
    group = f"{sc}/billing"
    made = ok(millrace(standalone, "readergroup", "create", group, "--stream", f"{sc}/st"))
    assert made.strip() == f"created {group} reading {sc}/st"
    assert ok(millrace(standalone, "readergroup", "list", sc)).split() == ["billing"]
    read = ok(millrace(standalone, "readergroup", "read", group, "--reader", "cli",
                       "--limit", "20"))  # fmt: skip
    assert read.splitlines() == [f"e{i}" for i in range(20)]
    # The reader left at its position: the next one goes on from there.
    rest = ok(millrace(standalone, "readergroup", "read", group, "--idle", "2"))
    assert rest.splitlines() == [f"e{i}" for i in range(20, 50)]
    info = json.loads(ok(millrace(standalone, "readergroup", "info", group, "--json")))
    assert info["readers"] == [] and len(info["unassignedSegments"]) == 2
    reset = ok(millrace(standalone, "readergroup", "reset", group))
    assert reset.strip() == f"reset {group}: generation 1"
    again = ok(millrace(standalone, "readergroup", "read", group, "--idle", "2"))
    assert again.splitlines() == [f"e{i}" for i in range(50)]
    no_reader = millrace(standalone, "readergroup", "checkpoint", group, "cp", "--timeout", "5")
    assert no_reader.returncode == 0, no_reader.stderr  # no reader online: complete at once
    assert ok(millrace(standalone, "readergroup", "delete", group)).strip() == f"deleted {group}"
    missing = millrace(standalone, "readergroup", "info", group)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    bad = millrace(standalone, "readergroup", "create", f"{sc}/x", "--stream", f"{sc}/st",
                   "--from", "middle")  # fmt: skip
    assert bad.returncode == 1 and "--from is head, tail" in bad.stderr


def test_kvt_commands(standalone: Standalone) -> None:
    sc = f"kv{uuid.uuid4().hex[:8]}"
    table = f"{sc}/users"
    ok(millrace(standalone, "scope", "create", sc))
    made = ok(millrace(standalone, "kvt", "create", table, "--partitions", "3",
                       "--primary-key-length", "4", "--secondary-key-length", "2"))  # fmt: skip
    assert made.strip() == f"created {table} (3 partitions)"
    assert ok(millrace(standalone, "kvt", "list", sc)).split() == ["users"]
    info = ok(millrace(standalone, "kvt", "info", table))
    assert "active, 3 partitions, keys of 4 + 2 bytes" in info and "partition 2:" in info
    first = ok(millrace(standalone, "kvt", "put", table, "u001n1", "ada")).split()[-1]
    assert ok(millrace(standalone, "kvt", "get", table, "u001n1")).splitlines() == [
        "ada",
        f"(version {first})",
    ]
    second = ok(millrace(standalone, "kvt", "put", table, "u001n1", "--version", first,
                         stdin="ada l."))  # fmt: skip
    assert int(second.split()[-1]) > int(first)
    refused = millrace(standalone, "kvt", "put", table, "u001n1", "lost", "--version", first)
    assert refused.returncode != 0 and "bad-key-version" in refused.stderr
    assert "is not at the expected version" in refused.stderr
    absent = millrace(standalone, "kvt", "put", table, "u001n1", "x", "--if-absent")
    assert absent.returncode != 0 and "bad-key-version" in absent.stderr
    assert "key b'u001n1' exists already" in absent.stderr
    ok(millrace(standalone, "kvt", "put", table, "u002n1", "bob", "--if-absent"))
    scanned = ok(millrace(standalone, "kvt", "scan", table)).splitlines()
    assert sorted(line.split("\t")[:2] for line in scanned) == [
        ["u001n1", "ada l."],
        ["u002n1", "bob"],
    ]
    assert ok(millrace(standalone, "kvt", "scan", table, "--prefix", "u002")).startswith("u002n1")
    bad = millrace(standalone, "kvt", "get", table, "short")
    assert bad.returncode != 0 and "6 bytes" in bad.stderr
    missing = millrace(standalone, "kvt", "get", table, "u009n1")
    assert missing.returncode != 0 and "key-not-found" in missing.stderr
    ok(millrace(standalone, "kvt", "remove", table, "u002n1"))
    assert len(ok(millrace(standalone, "kvt", "scan", table)).splitlines()) == 1
    ok(millrace(standalone, "kvt", "delete", table))
    assert ok(millrace(standalone, "kvt", "list", sc)).split() == []
