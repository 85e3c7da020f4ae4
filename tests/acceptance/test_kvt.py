"""Key-value tables through the Python client against a real ``millrace standalone``: puts,
gets, inserts and removes with their versions, batches of one primary key all or nothing,
iteration (all, one primary key, prefix, range) while entries change, clear errors for bad
keys and values, and four writer processes incrementing one counter by compare-and-set
losing no increment; with the version checks switched off (TEST-ONLY), increments are lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from millrace.client.kvt import (
    BadKeyVersionError,
    Insert,
    KeyNotFoundError,
    KeyValueTable,
    KeyValueTableManager,
    KvtError,
    Put,
    Remove,
)
from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import READY_LINE, Standalone, free_ports

PROGRAMS = Path(__file__).parent / "kvt_programs"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kvt(standalone: Standalone) -> Iterator[tuple[KeyValueTableManager, str]]:
    scope = f"k{uuid.uuid4().hex[:10]}"
    with KeyValueTableManager(standalone.base, standalone.token) as manager:
        with StreamManager(standalone.base, standalone.token) as streams:
            streams.create_scope(scope)
        yield manager, scope


def _table(manager: KeyValueTableManager, scope: str, **config: int) -> KeyValueTable:
    config = {"partitions": 4, "primary_key_length": 4, "secondary_key_length": 2} | config
    assert manager.create_kvt(scope, "t", **config)
    assert not manager.create_kvt(scope, "t", **config)  # (exists: False)
    return manager.open(scope, "t")


def test_puts_gets_and_versions(kvt: tuple[KeyValueTableManager, str]) -> None:
    manager, scope = kvt
    table = _table(manager, scope)
    first = table.put(b"u001", b"ada", b"n1")
    assert table.get(b"u001", b"n1").value == b"ada"
    assert table.get(b"u001", b"n1").version == first
    second = table.put(b"u001", b"ada l.", b"n1", version=first)
    assert second > first
    with pytest.raises(BadKeyVersionError):
        table.put(b"u001", b"lost", b"n1", version=first)
    with pytest.raises(BadKeyVersionError):
        table.insert(b"u001", b"again", b"n1")
    table.insert(b"u002", b"bob", b"n1")
    with pytest.raises(KeyNotFoundError):
        table.put(b"u003", b"ghost", b"n1", version=second)
    found = table.get_all([(b"u001", b"n1"), (b"u009", b"n1"), (b"u002", b"n1")])
    assert [e and e.value for e in found] == [b"ada l.", None, b"bob"]
    assert table.exists(b"u002", b"n1") and not table.exists(b"u002", b"n2")
    with pytest.raises(BadKeyVersionError):
        table.remove(b"u001", b"n1", version=first)
    table.remove(b"u001", b"n1", version=second)
    assert table.get(b"u001", b"n1") is None
    table.remove(b"u001", b"n1")  # unconditional: absent is fine
    assert manager.list_kvts(scope) == ["t"]
    assert manager.kvt_info(scope, "t")["partitionCount"] == 4


def test_batches_of_one_primary_key_are_all_or_nothing(
    kvt: tuple[KeyValueTableManager, str],
) -> None:
    manager, scope = kvt
    table = _table(manager, scope)
    versions = table.update([Put(b"ord1", b"open", b"st"), Insert(b"ord1", b"3", b"qt")])
    assert len(versions) == 2
    with pytest.raises(BadKeyVersionError):  # the insert fails: the put is not made either
        table.update([Put(b"ord1", b"paid", b"st"), Insert(b"ord1", b"4", b"qt")])
    assert table.get(b"ord1", b"st").value == b"open"
    table.update([Put(b"ord1", b"paid", b"st", version=versions[0]),
                  Put(b"ord1", b"4", b"qt", version=versions[1])])  # fmt: skip
    assert [e.value for e in table.entries(primary_key=b"ord1")] == [b"4", b"paid"]
    table.update([Remove(b"ord1", b"st"), Remove(b"ord1", b"qt")])
    assert list(table.entries(primary_key=b"ord1")) == []
    with pytest.raises(KvtError, match="one primary key"):
        table.update([Put(b"ord1", b"x", b"st"), Put(b"ord2", b"y", b"st")])
    with pytest.raises(KvtError, match="not both"):
        table.update([Put(b"ord1", b"x", b"st"), Remove(b"ord1", b"qt")])


def test_iteration_all_one_primary_key_prefix_and_range_while_entries_change(
    kvt: tuple[KeyValueTableManager, str],
) -> None:
    manager, scope = kvt
    table = _table(manager, scope, secondary_key_length=0)
    keys = [f"{c}{n:03d}".encode() for c in "ab" for n in range(150)]
    for key in keys:
        table.put(key, key.upper())
    seen = []
    for n, entry in enumerate(table.entries()):  # changes while iterating
        seen.append(entry.primary_key)
        if n % 10 == 0:
            table.put(b"z%03d" % n, b"new")  # new keys may or may not be seen
            table.put(keys[-1 - n // 10], b"changed")  # present all along: seen once
    lasting = [k for k in seen if not k.startswith(b"z")]
    assert sorted(lasting) == keys and len(lasting) == len(set(lasting))
    assert sorted(e.primary_key for e in table.entries(prefix=b"b1")) == [
        k for k in keys if k.startswith(b"b1")
    ]
    ranged = sorted(e.primary_key for e in table.keys(from_key=b"a140", to_key=b"b004"))
    assert ranged == [k for k in keys if b"a140" <= k <= b"b004"]
    page, token = table.page(7)
    assert len(page) == 7 and token
    rest, _ = table.page(1000, token)
    assert not {e.primary_key for e in page} & {e.primary_key for e in rest}


def test_bad_keys_and_values_get_clear_errors(kvt: tuple[KeyValueTableManager, str]) -> None:
    manager, scope = kvt
    table = _table(manager, scope)
    with pytest.raises(KvtError, match="primary key of this table is 4 bytes, not 3"):
        table.put(b"abc", b"v", b"n1")
    with pytest.raises(KvtError, match="secondary key of this table is 2 bytes"):
        table.get(b"abcd")
    with pytest.raises(KvtError, match="over"):
        table.put(b"abcd", b"x" * (1024 * 1024), b"n1")
    with pytest.raises(KvtError, match="version"):
        table.put(b"abcd", b"v", b"n1", version=-5)
    with pytest.raises(KvtError, match="partition count"):
        manager.create_kvt(scope, "bad", partitions=0, primary_key_length=4)
    assert table.put(b"abcd", b"still serving", b"n1") >= 0


def _counters(node: Standalone, scope: str, processes: int, times: int) -> tuple[int, int]:
    """(the counter at the end, the conflicts the writers met)."""
    with KeyValueTableManager(node.base, node.token) as manager:
        manager.create_kvt(scope, "c", partitions=2, primary_key_length=8)
        table = manager.open(scope, "c")
        table.insert(b"counter!", b"0")
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        writers = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(PROGRAMS / "counter.py"),
                    node.base,
                    node.token,
                    scope,
                    "c",
                    str(times),
                ],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(processes)
        ]
        outputs = [w.communicate(timeout=600)[0] for w in writers]
        assert all(w.returncode == 0 for w in writers), outputs
        conflicts = sum(int(o.split()[-1]) for o in outputs)
        return int(table.get(b"counter!").value), conflicts


def test_four_processes_compare_and_set_one_counter_and_lose_nothing(
    kvt: tuple[KeyValueTableManager, str], standalone: Standalone
) -> None:
    _, scope = kvt
    count, conflicts = _counters(standalone, scope, processes=4, times=10_000)
    assert count == 40_000 and conflicts > 0  # they did race


def test_without_the_version_checks_increments_are_lost(tmp_path: Path) -> None:
    """The guard switched off (TEST-ONLY ``no-table-versions``): the same writers overwrite
    each other's increments."""
    node = Standalone(tmp_path / "data", *free_ports(2),
                      env={"MILLRACE_TEST_UNSAFE": "no-table-versions"})  # fmt: skip
    try:
        node.wait_for(READY_LINE)
        with StreamManager(node.base, node.token) as streams:
            streams.create_scope("unsafe")
        assert _counters(node, "unsafe", processes=4, times=300)[0] < 1200
    finally:
        node.kill()


def test_the_readme_program_runs_as_printed(standalone: Standalone, tmp_path: Path) -> None:
    from tests.acceptance.test_node_heals import readme_program

    program = readme_program("users").replace("http://127.0.0.1:9091", standalone.base)
    with StreamManager(standalone.base, standalone.token) as streams:
        streams.create_scope("demo")
    (tmp_path / "users.py").write_text(program)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "users.py")], env=env, text=True, capture_output=True,
        cwd=standalone.data_dir.parent, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == """b'{"name": "Ada L."}' [b'user-001', b'user-002']"""


def test_a_killed_segment_store_loses_no_acknowledged_put(tmp_path: Path) -> None:
    """The segment store process is SIGKILLed twice while a program puts entries and
    compare-and-sets a counter; the node restarts it, it recovers the table segments from
    tier-1, and every acknowledged put and increment is there. A put whose connection was lost
    after it was sent is put again by the program (the client leaves that to it)."""
    from millrace.client.errors import ConnectionLostError

    node = Standalone(tmp_path / "data", *free_ports(2))
    try:
        node.wait_for(READY_LINE)
        with StreamManager(node.base, node.token) as streams:
            streams.create_scope("crash")
        with KeyValueTableManager(node.base, node.token) as manager:
            manager.create_kvt("crash", "t", partitions=3, primary_key_length=8)
            table = manager.open("crash", "t")
            table.insert(b"counter!", b"0")
            acked: dict[bytes, bytes] = {}
            count = 0
            killed: list[int] = []
            for n in range(1500):
                if n in (400, 900):
                    killed.append(node.child_running("segmentstore"))
                    os.kill(killed[-1], signal.SIGKILL)
                key = b"k%07d" % n
                while True:
                    try:
                        table.put(key, b"v%d" % n)
                        break
                    except ConnectionLostError:
                        continue  # (sent or not: putting the same value again is harmless)
                acked[key] = b"v%d" % n
                while True:  # a compare-and-set increment: never applied twice
                    entry = table.get(b"counter!")
                    assert entry is not None
                    try:
                        table.put(b"counter!", b"%d" % (int(entry.value) + 1),
                                  version=entry.version)  # fmt: skip
                        count += 1
                        break
                    except (BadKeyVersionError, ConnectionLostError):
                        continue
            found = {e.primary_key: e.value for e in table.entries()}
            assert node.child_running("segmentstore") not in killed  # (restarted by the node)
            assert all(found.get(k) == v for k, v in acked.items())
            # A lost reply may hide an increment that was made: never fewer than acknowledged.
            assert count <= int(found[b"counter!"]) <= count + 2
    finally:
        node.kill()
