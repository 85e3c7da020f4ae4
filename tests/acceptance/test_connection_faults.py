"""Connection faults between the clients and the node: nothing lost or repeated.

A ``millrace standalone`` node whose segment store is registered behind ``FaultyProxy`` (the
node's address in the host store points at the proxy, as for a node behind a load balancer),
so every connection to it (the Python client's writer, event reader and reader-group reader,
and the controller's own) goes through the proxy. While the writer writes, the proxy resets
every connection, freezes all traffic for a few seconds, and cuts a reply in the middle of a
frame. Afterwards every acknowledged event is read exactly once by both readers, per routing
key in the order written.

And one between a reader and the controller: the answers of its syncs are cut while the group
gives it segments, and it still reads them.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.faulty_proxy import FaultyProxy
from tests.acceptance.standalone_node import READY_LINE, Standalone, free_ports, request
from tests.acceptance.test_node_heals import batch, in_order_once

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

STALL_SECONDS = 4.0


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Standalone, FaultyProxy]]:
    http, wire = free_ports(2)
    node = Standalone(tmp_path / "data", http, wire)
    proxy: FaultyProxy | None = None
    try:
        node.wait_for(READY_LINE)
        proxy = FaultyProxy(wire)
        with sqlite3.connect(tmp_path / "data" / "millrace.sqlite3") as db:
            db.execute("UPDATE controller_app_node SET port = ?", (proxy.port,))
        yield node, proxy
    finally:
        if proxy is not None:
            proxy.close()
        node.kill()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Standalone]:
    http, wire = free_ports(2)
    node = Standalone(tmp_path / "data", http, wire)
    try:
        node.wait_for(READY_LINE)
        yield node
    finally:
        node.kill()


class Collector(threading.Thread):
    """Reads with ``read_next`` until the stream ends; keeps each event's text."""

    def __init__(self, reader: Any) -> None:
        super().__init__(daemon=True)
        self.read_next: Callable[[float], Any] = reader.read_next
        self.finished: Callable[[], bool] = lambda: bool(reader.finished)
        self.seen: list[str] = []
        self.places: dict[str, list[tuple[str, int]]] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while True:
                event = self.read_next(1.0)
                if event is None:
                    if self.finished():
                        return
                    continue
                if not getattr(event, "is_checkpoint", False):
                    self.seen.append(event.data.decode())
                    place = (str(event.segment), event.offset)
                    self.places.setdefault(self.seen[-1], []).append(place)
        except BaseException as exc:  # shown by the test
            self.error = exc


def test_clients_recover_from_cuts_stalls_and_resets(
    proxied: tuple[Standalone, FaultyProxy],
) -> None:
    node, proxy = proxied
    scope = f"f{uuid.uuid4().hex[:8]}"
    manager = StreamManager(node.base, token=node.token)
    try:
        manager.create_scope(scope)
        manager.create_stream(scope, "st", initial_segments=3)
        manager.create_reader_group(scope, "rg", [f"{scope}/st"], reader_timeout_ms=60_000)
        reader = manager.create_reader(scope, "st")
        member = manager.reader_group(scope, "rg").create_reader("r1")
        collectors = [Collector(reader), Collector(member)]
        for collector in collectors:
            collector.start()
        writer = manager.create_writer(scope, "st")
        written: list[tuple[str, str]] = []
        cuts: list[int] = []
        faults = [
            ("cut", lambda: cuts.append(proxy.cut())),
            ("stall", lambda: proxy.stall(STALL_SECONDS)),
            ("reset mid-frame", proxy.reset_mid_frame),
            ("cut again", lambda: cuts.append(proxy.cut())),
        ]
        for name, fault in faults:
            events = batch(name.replace(" ", "-"), 2000, keys=7)
            for data, key in events[:1000]:
                writer.write_event(data, routing_key=key)
            fault()
            for data, key in events[1000:]:
                writer.write_event(data, routing_key=key)
            written += events
            time.sleep(0.5)
        writer.flush()
        writer.close()
        assert proxy.resets >= 1, "no reply was cut mid-frame"
        assert all(cuts), f"connections cut: {cuts} (the clients must go through the proxy)"
        status, answer = request(node.base, "PUT", f"/v1/scopes/{scope}/streams/st/state",
                                 node.token, {"streamState": "SEALED"})  # fmt: skip
        assert status == 200, answer
        for collector in collectors:
            collector.join(120)
            assert not collector.is_alive(), f"a reader is stuck at {len(collector.seen)}"
            assert collector.error is None, repr(collector.error)
        expected = {data for data, _ in written}
        found = [(len(c.seen) - len(set(c.seen)), len(expected - set(c.seen))) for c in collectors]
        twice = {d: p for d, p in collectors[0].places.items() if len(p) > 1}
        assert found == [(0, 0), (0, 0)], f"(repeated, missing) per reader: {found}: {twice}"
        for collector in collectors:
            in_order_once(collector.seen, written)
        member.close()
        reader.close()
    finally:
        manager.close()


def test_a_reader_whose_sync_answers_are_cut_still_reads_every_segment(node: Standalone) -> None:
    """Reader ``b`` talks to the controller through the proxy, which cuts every answer ``b``
    gets while the group hands it half the segments: the controller committed the change, and
    ``b`` never heard of it. Its next sync leaves those segments out of its positions, and the
    controller gives them again; after the seal both readers finish, every event read once
    (without that, ``b``'s segments stay assigned to it and unread, and the group never
    finishes)."""
    proxy = FaultyProxy(int(node.base.rsplit(":", 1)[1]))
    scope = f"f{uuid.uuid4().hex[:8]}"
    manager = StreamManager(node.base, token=node.token)
    behind = StreamManager(f"http://127.0.0.1:{proxy.port}", token=node.token)
    group = f"/v1/scopes/{scope}/readergroups/rg"
    try:
        manager.create_scope(scope)
        manager.create_stream(scope, "st", initial_segments=4)
        manager.create_reader_group(scope, "rg", [f"{scope}/st"], reader_timeout_ms=60_000)
        writer = manager.create_writer(scope, "st")
        written = batch("before", 1000, keys=8)
        for data, key in written:
            writer.write_event(data, routing_key=key)
        writer.flush()
        first = Collector(manager.reader_group(scope, "rg").create_reader("a"))
        first.start()

        def held() -> dict[str, int]:
            status, answer = request(node.base, "GET", group, node.token)
            assert status == 200, answer
            return {r["readerId"]: len(r["segments"]) for r in answer["readers"]}

        deadline = time.monotonic() + 30
        while held().get("a") != 4:
            assert time.monotonic() < deadline, f"a holds {held()}"
            time.sleep(0.1)
        second = Collector(behind.reader_group(scope, "rg").create_reader("b"))
        second.start()
        # Every answer b gets is cut (armed again at once after each cut) until the controller
        # has given b its share.
        proxy.reset_mid_frame()
        cuts, deadline = 0, time.monotonic() + 60
        while held().get("b") != 2:
            assert time.monotonic() < deadline, f"the group never gave b its share: {held()}"
            if proxy.resets > cuts:
                cuts = proxy.resets
                proxy.reset_mid_frame()
            time.sleep(0.005)
        assert proxy.resets >= 1, "no answer to b was cut"
        more = batch("after", 1000, keys=8)
        for data, key in more:
            writer.write_event(data, routing_key=key)
        writer.flush()
        writer.close()
        status, answer = request(node.base, "PUT", f"/v1/scopes/{scope}/streams/st/state",
                                 node.token, {"streamState": "SEALED"})  # fmt: skip
        assert status == 200, answer
        for collector in (first, second):
            collector.join(120)
            assert not collector.is_alive(), f"a reader is stuck: the group is {held()}"
            assert collector.error is None, repr(collector.error)
        assert second.seen, "b read nothing"
        assert sorted(first.seen + second.seen) == sorted(data for data, _ in written + more)
    finally:
        behind.close()
        manager.close()
        proxy.close()


def test_a_client_given_several_controllers_goes_past_one_that_is_down(node: Standalone) -> None:
    """Nothing listens at the first controller address (a controller that died); the second is
    the node: every call goes there, at once, and the writer and reader work as with one."""
    (dead,) = free_ports(1)
    manager = StreamManager(f"http://127.0.0.1:{dead},{node.base}", token=node.token)
    scope = f"m{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    assert manager.create_scope(scope)
    assert time.monotonic() - started < 5, "the client waited on the dead controller"
    manager.create_stream(scope, "st", initial_segments=2)
    writer = manager.create_writer(scope, "st")
    for i in range(100):
        writer.write_event(f"e{i}", routing_key=f"k{i % 4}")
    writer.flush()
    reader = manager.create_reader(scope, "st")
    got = sorted(reader.read_next(timeout=30).data.decode() for _ in range(100))
    assert got == sorted(f"e{i}" for i in range(100))
    reader.close()
    writer.close()
    manager.close()
