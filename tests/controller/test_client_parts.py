"""The client's parts one at a time (the writer, the reader group, the key-value table),
against a controller served in this process (Django's live server) and a segment store node:
smaller than the whole-process acceptance tests, and what shows a client regression first.
Each runs with the blocking client's I/O thread on uvloop (where installed) and on asyncio's
own loop (``MILLRACE_EVENT_LOOP``)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from controller_app.access.roles import grant
from controller_app.access.tokens import token_for
from millrace.client.kvt import BadKeyVersionError, KeyValueTableManager, Put, Remove
from millrace.client.manager import StreamManager
from millrace.kernel.kvt import partition_of
from tests.controller.conftest import NodeProcess


@pytest.fixture
def token(live_server: Any, registered_node: NodeProcess) -> str:
    """An operator's API token for the live server."""
    user = get_user_model().objects.create_user(f"c{uuid.uuid4().hex[:8]}")
    grant(user, "operator")
    return token_for(user)


@pytest.fixture(params=["uvloop", "asyncio"])
def event_loop_choice(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The blocking client's event loop for the test."""
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv("MILLRACE_EVENT_LOOP", request.param)
    return str(request.param)


@pytest.fixture
def manager(live_server: Any, token: str, event_loop_choice: str) -> Iterator[StreamManager]:
    with StreamManager(live_server.url, token=token) as made:
        assert type(made._loop.loop).__module__.split(".")[0] == event_loop_choice
        yield made


def _scope(manager: StreamManager) -> str:
    name = f"cp{uuid.uuid4().hex[:8]}"
    manager.create_scope(name)
    return name


def test_the_writer_keeps_each_keys_order_and_one_key_in_one_segment(
    manager: StreamManager,
) -> None:
    scope = _scope(manager)
    manager.create_stream(scope, "orders", initial_segments=3)
    with manager.create_writer(scope, "orders") as writer:
        for i in range(300):
            writer.write_event(f"{i % 7}:{i}", routing_key=f"key-{i % 7}")
        writer.flush()
    reader = manager.create_reader(scope, "orders")
    by_key: dict[str, list[int]] = defaultdict(list)
    segments: dict[str, set[int]] = defaultdict(set)
    for read in iter(lambda: reader.read_next(timeout=5), None):
        key, number = read.data.decode().split(":")
        by_key[key].append(int(number))
        segments[key].add(read.segment)
    assert sum(len(v) for v in by_key.values()) == 300
    assert all(numbers == sorted(numbers) for numbers in by_key.values())
    assert all(len(found) == 1 for found in segments.values())  # (a key has one segment)


def test_a_reader_group_hands_each_event_to_one_reader_and_checkpoints(
    manager: StreamManager,
) -> None:
    scope = _scope(manager)
    manager.create_stream(scope, "s", initial_segments=2)
    with manager.create_writer(scope, "s") as writer:
        for i in range(100):
            writer.write_event(str(i), routing_key=f"k{i % 10}")
    group = manager.create_reader_group(scope, "g", [f"{scope}/s"])
    first, second = group.create_reader("r1"), group.create_reader("r2")
    seen: list[str] = []
    pending = group.start_checkpoint("cp-1")
    quiet = 0  # rounds in a row in which neither reader had anything
    while quiet < 5 or not pending.done():
        before = len(seen)
        for reader in (first, second):  # each drains what it has, then lets the other go
            while (read := reader.read_next(timeout=0.2)) is not None:
                if not read.is_checkpoint:
                    seen.append(read.data.decode())
        quiet = quiet + 1 if len(seen) == before else 0
    assert sorted(seen, key=int) == [str(i) for i in range(100)]  # each once
    cuts = pending.result()
    assert set(cuts) == {f"{scope}/s"}
    first.close()
    second.close()


def test_the_table_client_pages_conditions_and_batches(
    live_server: Any, token: str, manager: StreamManager
) -> None:
    scope = _scope(manager)
    with KeyValueTableManager(live_server.url, token) as tables:
        assert tables.create_kvt(scope, "t", partitions=4, primary_key_length=4)
        with tables.open(scope, "t") as table:
            keys = [b"k%03d" % n for n in range(60)]
            for key in keys:
                table.put(key, key.upper())
            # pages over every partition, each key once, in partition then key order
            listed = [entry.primary_key for entry in table.entries()]
            assert sorted(listed) == keys
            order = [(partition_of(k, 4), k) for k in listed]
            assert order == sorted(order)
            small, token = table.page(limit=7)
            assert len(small) == 7 and token
            # a condition refused changes nothing; a batch of one primary key is all or none
            version = table.get(b"k001").version
            table.put(b"k001", b"new", version=version)
            with pytest.raises(BadKeyVersionError):
                table.put(b"k001", b"lost", version=version)
            assert table.get(b"k001").value == b"new"
            with pytest.raises(BadKeyVersionError):
                table.update([Put(b"k002", b"x", version=version + 10**6)])
            table.update([Remove(b"k003")])
            assert table.get(b"k003") is None and table.get(b"k002").value == b"K002"
