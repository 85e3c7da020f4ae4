"""Reader-group lag measured and judged by the controller (``controller_app.lag``), on a
``millrace standalone`` node whose lag round runs every second, as programs and operators see
it: REST (``GET …/readergroups/{rg}/lag``), ``millrace readergroup lag`` and the controller's
``/metrics``.

A reader stopped at a known position shows the bytes, events and seconds it is behind (the
blocking reader's position moves past a batch of events when it takes the next batch). Its
status is then walked through every state:
* OK while measuring;
* STALL while it syncs but does not read, as more data arrives;
* WARN while it reads more slowly than the writer writes;
* OK once it has caught up;
* STOP once it has left;
* OK again after a new reader resumes from the group's positions and reads to the end."""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import Standalone, eventually, request, running_standalone

pytestmark = pytest.mark.slow

#: Each event is 8 bytes of header and this many of data: 100 bytes in the segment.
DATA = b"x" * 92
EVENT = 100


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory, "lag", {"MILLRACE_LAG_PERIOD_S": "1"})


def _lag(node: Standalone, scope: str) -> dict[str, Any]:
    status, found = request(node.base, "GET", f"/v1/scopes/{scope}/readergroups/g/lag", node.token)
    assert status == 200, found
    return dict(found)


def _status(node: Standalone, scope: str, wanted: str, timeout: float = 30) -> dict[str, Any]:
    return dict(eventually(
        lambda: (found := _lag(node, scope))["status"] == wanted and found,
        timeout, f"status {wanted}",
    ))  # fmt: skip


def _write(manager: StreamManager, scope: str, count: int) -> None:
    with manager.create_writer(scope, "st") as writer:
        for _ in range(count):
            writer.write_event(DATA, routing_key="k")
        writer.flush()


def _metrics(node: Standalone) -> str:
    asked = urllib.request.Request(
        f"{node.base}/metrics", headers={"Authorization": f"Token {node.token}"}
    )
    with urllib.request.urlopen(asked, timeout=30) as answer:
        return str(answer.read().decode())


def _cli(node: Standalone, *args: str) -> str:
    return node.cli(*args).stdout


def test_a_readers_lag_and_the_groups_status_through_every_state(node: Standalone) -> None:
    scope = f"lag{uuid.uuid4().hex[:8]}"
    manager = StreamManager(node.base, token=node.token)
    manager.create_scope(scope)
    manager.create_stream(scope, "st", 1)
    _write(manager, scope, 40)
    group = manager.create_reader_group(scope, "g", [f"{scope}/st"])
    reader = group.create_reader("r1")
    for _ in range(40):
        assert reader.read_next(timeout=10) is not None
    # (the blocking reader's position moves past a batch when it takes the next one)
    assert reader.read_next(timeout=1) is None
    _write(manager, scope, 60)

    # stopped at a known position: 60 events unread, 6,000 bytes
    behind = eventually(
        lambda: (found := _lag(node, scope))["lagBytes"] == 60 * EVENT and found,
        30, "the reader's position reported",
    )  # fmt: skip
    assert behind["lagEvents"] == 60  # (the segment's mean event size: 100 bytes)
    [r1] = behind["readers"]
    assert (r1["readerId"], r1["online"], r1["lagBytes"]) == ("r1", True, 60 * EVENT)
    [segment] = r1["segments"]
    assert (segment["position"], segment["length"]) == (40 * EVENT, 100 * EVENT)
    assert 0 <= behind["lagSeconds"] < 60  # (at least since the group's first round)

    # syncing, not reading, while more arrives: STALL
    _write(manager, scope, 10)
    stalled = _status(node, scope, "STALL")
    assert "positions unmoved" in stalled["reason"] and stalled["lagBytes"] == 70 * EVENT
    assert stalled["lagSeconds"] >= 4  # (unread since before the five rounds of the window)
    shown = _cli(node, "readergroup", "lag", f"{scope}/g", "--url", node.base)
    assert f"{scope}/g: STALL" in shown and "reader r1: 7,000 bytes, 70 events" in shown
    metrics = _metrics(node)
    assert f'millrace_readergroup_lag_bytes{{readergroup="g",scope="{scope}"}} 7000.0' in metrics
    assert (f'millrace_readergroup_status{{readergroup="g",scope="{scope}",status="STALL"}} 1.0'
            in metrics)  # fmt: skip

    # reading more slowly than the writer writes: WARN
    stop = threading.Event()

    def write_fast() -> None:
        with (
            StreamManager(node.base, token=node.token) as own,
            own.create_writer(scope, "st") as writer,
        ):
            while not stop.is_set():
                for _ in range(20):
                    writer.write_event(DATA, routing_key="k")
                writer.flush()
                time.sleep(0.1)

    writing = threading.Thread(target=write_fast, daemon=True)
    writing.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _lag(node, scope)["status"] != "WARN":
            reader.read_batch(5, timeout=1)  # (each batch taken moves the last one's position)
            time.sleep(0.1)  # (about fifty events a second, against two hundred written)
        assert _lag(node, scope)["status"] == "WARN"
    finally:
        stop.set()
        writing.join(30)

    # caught up: OK
    def caught_up() -> bool:  # (OK comes while catching up too: wait for nothing unread)
        while reader.read_batch(1000, timeout=0.2):
            pass
        found = _lag(node, scope)
        return found["status"] == "OK" and found["lagBytes"] == 0

    eventually(caught_up, 60, "caught up")

    # the reader leaves at a known position: STOP; a new reader resumes there and reads on
    _write(manager, scope, 25)
    reader.close()
    stopped = _status(node, scope, "STOP")
    assert stopped["readersOnline"] == 0 and stopped["lagBytes"] == 25 * EVENT
    assert stopped["unassigned"][0]["lagBytes"] == 25 * EVENT
    again = group.create_reader("r2")
    events = 0
    while again.read_next(timeout=5) is not None:
        events += 1
    assert events == 25
    resumed = _status(node, scope, "OK")
    assert resumed["readers"][0]["readerId"] == "r2"
    again.close()
    manager.close()
