"""The standalone supervisor with real child processes (small Python programs), in process.

Each child program counts its starts in a file and behaves by that count: ready and serving,
exiting before it is ready (a crash during recovery), or hung (it stops answering its liveness
check). The delays are shortened for the tests. Each guard is also run switched off
(``no-restart-while-starting``, ``no-liveness-restart``) and the same check must then fail.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from millrace.ops import standalone
from millrace.ops.standalone import Child, ChildState, StandaloneError, Supervisor

#: The child program: start number N (from the count file) does what ``plan`` says for N:
#: "ready" (prints ready, serves), "crash" (exits 3 before ready), "hang" (ready, then stops
#: answering: the alive file is removed).
PROGRAM = """
import os, sys, time
count_file, plan = sys.argv[1], sys.argv[2].split(",")
n = int(open(count_file).read()) if os.path.exists(count_file) else 0
open(count_file, "w").write(str(n + 1))
what = plan[min(n, len(plan) - 1)]
print(f"start {n}: {what}", flush=True)
if what == "crash":
    time.sleep(0.05)
    sys.exit(3)
print(f"ready {os.getpid()}", flush=True)
if what == "hang":
    os.remove(count_file + ".alive") if os.path.exists(count_file + ".alive") else None
else:
    open(count_file + ".alive", "w").close()
time.sleep(120)
"""


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(standalone, "RESTART_DELAY_FIRST_SECONDS", 0.05)
    monkeypatch.setattr(standalone, "RESTART_DELAY_MAX_SECONDS", 0.4)
    monkeypatch.setattr(standalone, "LIVENESS_TIMEOUT_SECONDS", 1.0)
    monkeypatch.setattr(standalone, "LIVENESS_INTERVAL_SECONDS", 0.1)
    monkeypatch.setattr(standalone, "READY_TIMEOUT_SECONDS", 20.0)
    monkeypatch.setattr(standalone, "TICK_SECONDS", 0.05)


def make_child(tmp_path: Path, name: str, plan: str) -> Child:
    count = tmp_path / f"{name}.count"
    child = Child(name, [sys.executable, "-c", PROGRAM, str(count), plan], lambda: False)
    child.ready = lambda: said_ready(child)
    child.alive = lambda: (tmp_path / f"{name}.count.alive").exists()
    return child


def said_ready(child: Child) -> bool:
    """The running process printed "ready" (the output kept spans restarts, and the reader
    of the output may lag behind a restart: the line names the process)."""
    process = child.process
    return process is not None and f"ready {process.pid}" in list(child.output)


class Running:
    """A supervisor watching in a thread; ``error`` is what stopped it, if anything."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.error: BaseException | None = None
        self.lines: list[str] = []
        supervisor.start_all()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        try:
            self.supervisor.watch()
        except BaseException as exc:  # what the node's run() would report and stop on
            self.error = exc

    def until(self, condition: object, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():  # type: ignore[operator]
            if self.error is not None:
                raise self.error
            assert time.monotonic() < deadline, self.supervisor.snapshot()
            time.sleep(0.05)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for running in started:
        running.supervisor.stop_all()


def start(run: list[Running], children: list[Child], **kwargs: object) -> Running:
    """A supervisor of ``children`` started and watching; its log lines in ``.lines``."""
    lines: list[str] = []
    running = Running(Supervisor(children, echo=lines.append, **kwargs))  # type: ignore[arg-type]
    running.lines = lines
    run.append(running)
    return running


def kill(child: Child) -> None:
    assert child.process is not None
    os.kill(child.process.pid, signal.SIGKILL)


def test_an_exit_during_the_restart_is_one_more_restart(tmp_path: Path, run: list) -> None:
    child = make_child(tmp_path, "store", "ready,crash,crash,crash,ready")
    running = start(run, [child], state_file=tmp_path / "state.json")
    kill(child)
    running.until(lambda: child.restarts == 4 and child.state is ChildState.READY)
    assert running.error is None
    crashed = [line for line in running.lines if "exited (exit status 3)" in line]
    assert len(crashed) == 3 and "its last output" in crashed[0]

    def written() -> tuple[str, int]:
        # (the supervisor's thread writes the file just after it sets the state in memory)
        state = json.loads((tmp_path / "state.json").read_text())["children"]["store"]
        return state["state"], state["restarts"]

    running.until(lambda: written() == ("ready", 4), timeout=5)


def test_without_the_guard_an_exit_during_the_restart_stops_the_node(
    tmp_path: Path, run: list
) -> None:
    child = make_child(tmp_path, "store", "ready,crash,ready")
    running = start(run, [child], unsafe=frozenset({"no-restart-while-starting"}))
    kill(child)
    with pytest.raises(StandaloneError, match="store exited while starting"):
        running.until(lambda: child.restarts >= 2 and child.state is ChildState.READY)


def test_restart_delays_grow_up_to_the_ceiling_and_never_give_up(tmp_path: Path, run: list) -> None:
    child = make_child(tmp_path, "store", "ready," + ",".join(["crash"] * 12) + ",ready")
    delays: list[float] = []
    running = start(run, [child])
    original = running.supervisor._set

    def spy(target: Child, state: ChildState, reason: str = "") -> None:
        if state is ChildState.WAITING:
            delays.append(round(target.restart_at - time.monotonic(), 2))
        original(target, state, reason)

    running.supervisor._set = spy  # type: ignore[method-assign]
    kill(child)
    running.until(lambda: child.restarts == 13 and child.state is ChildState.READY, timeout=30)
    assert delays[:4] == pytest.approx([0.05, 0.075, 0.1125, 0.169], abs=0.03)
    assert max(delays) <= 0.4 + 0.01 and delays[-1] == pytest.approx(0.4, abs=0.03)


def test_a_child_that_stops_answering_is_killed_and_restarted(tmp_path: Path, run: list) -> None:
    child = make_child(tmp_path, "store", "ready,hang,ready")
    running = start(run, [child])
    kill(child)  # comes back hung
    running.until(lambda: child.restarts == 1 and child.state is ChildState.READY)
    hung = child.process
    running.until(lambda: child.restarts == 2 and child.state is ChildState.READY)
    assert hung is not None and hung.returncode == -signal.SIGKILL
    killed = [line for line in running.lines if "did not answer its liveness check" in line]
    assert killed and "restarting in" in killed[-1] and "start 1: hang" in killed[-1]


def test_without_the_guard_a_hung_child_is_left_alone(tmp_path: Path, run: list) -> None:
    child = make_child(tmp_path, "store", "ready,hang,ready")
    running = start(run, [child], unsafe=frozenset({"no-liveness-restart"}))
    kill(child)
    running.until(lambda: child.restarts == 1 and child.state is ChildState.READY)
    with pytest.raises(AssertionError):
        running.until(lambda: child.restarts == 2, timeout=3 * standalone.LIVENESS_TIMEOUT_SECONDS)


def test_the_first_start_fails_fast_with_the_childs_output(tmp_path: Path) -> None:
    first = make_child(tmp_path, "store", "ready")
    broken = make_child(tmp_path, "worker", "crash")
    supervisor = Supervisor([first, broken], echo=lambda line: None)
    try:
        started = time.monotonic()
        with pytest.raises(StandaloneError) as error:
            supervisor.start_all()
        assert time.monotonic() - started < 10
    finally:
        supervisor.stop_all()
    message = str(error.value)
    assert message.startswith("worker exited while starting (exit status 3)")
    assert "start 0: crash" in message


def test_other_children_are_looked_after_while_one_starts(tmp_path: Path, run: list) -> None:
    """An earlier child that dies while a later one is starting is restarted, not fatal."""
    store = make_child(tmp_path, "store", "ready")
    slow = make_child(tmp_path, "worker", "ready")
    slow.ready = lambda: said_ready(slow) and store.restarts >= 1
    threading.Timer(0.5, lambda: kill(store)).start()
    running = start(run, [store, slow])
    assert store.restarts == 1 and running.supervisor.started


def test_stop_all_stops_children_in_reverse_order(tmp_path: Path) -> None:
    children = [make_child(tmp_path, name, "ready") for name in ("a", "b", "c")]
    supervisor = Supervisor(children, echo=lambda line: None, state_file=tmp_path / "s.json")
    supervisor.start_all()
    assert (tmp_path / "s.json").exists()
    order: list[str] = []
    for child in children:
        process = child.process
        assert process is not None
        original = process.terminate
        process.terminate = lambda c=child, o=original: (order.append(c.name), o())  # type: ignore[method-assign]
    supervisor.stop_all()
    assert order == ["c", "b", "a"]
    assert all(child.process is not None and child.process.poll() is not None for child in children)
    assert not (tmp_path / "s.json").exists()


def test_a_child_that_cannot_be_started_again_is_retried(tmp_path: Path, run: list) -> None:
    """A restart that fails to start the process at all (here its program is gone; in life no
    memory or file descriptors) is one more failure, retried: the node goes on."""
    child = make_child(tmp_path, "store", "ready")
    running = start(run, [child])
    program = child.argv
    child.argv = [str(tmp_path / "no-such-program")]
    kill(child)
    running.until(lambda: any("could not be started" in line for line in running.lines))
    assert child.state is ChildState.WAITING and running.error is None
    child.argv = program
    running.until(lambda: child.state is ChildState.READY and child.restarts == 1)
