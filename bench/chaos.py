"""A chaos run: random faults every 20-40 s for many minutes on a cluster under every client.

Starts what ``bench/network_faults.py`` starts (a private network of three hosts, a private
PostgreSQL, a cluster whose segment store nodes each run in a host of their own, two
controllers) and, all given both controllers:

* the keyed writer (``tests.acceptance.network_faults``: 2,000 events/s over 24 keys);
* a reader group of two readers reading that stream;
* a transactional writer committing transactions of 50 events to another stream;
* two key-value table writers incrementing shared counters by compare-and-set, each keeping its
  own tally inside the value (so an update whose answer was lost is settled by reading it back);
* the README's ``resume.py``, following the writer's stream over a WebSocket.

Every 20-40 s (``--gap``) one fault, picked at random, hits a random node or controller for 5-15 s:
a partition, a pause (SIGSTOP), a SIGKILL, the database cut from a node, an asymmetric cut, a
controller's SIGKILL; each is undone and the cluster settles before the next. After
``--minutes``: the stream is sealed and the clients finish, then the checks: every acknowledged
event read back once and in order per key, and read once by the group and once by the tail;
every committed transaction whole and no other; every counter exact; no client stuck (each made
progress in the last minute and finished). Prints a line per fault and the figures.

    .venv/bin/python bench/chaos.py [--minutes 20] [--seed 1] [--keep]   (--keep: keep the logs)
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from millrace.client.kvt import BadKeyVersionError, KeyValueTableManager  # noqa: E402
from millrace.client.manager import StreamManager  # noqa: E402
from millrace.client.transactions import TxnFailedError  # noqa: E402
from tests.acceptance.cluster import LocalCluster  # noqa: E402
from tests.acceptance.keyed_probe import read_back  # noqa: E402
from tests.acceptance.netns import PrivateNetwork  # noqa: E402
from tests.acceptance.network_faults import (  # noqa: E402
    FAULTS,
    FaultRun,
    cluster_on_hosts,
    ready_for_hosts,
)
from tests.acceptance.test_connection_faults import Collector  # noqa: E402
from tests.acceptance.test_node_heals import Program  # noqa: E402

TXN_EVENTS = 50
COUNTERS = [f"counter-{i}".encode() for i in range(4)]


class Worker(threading.Thread):
    """A client loop in a thread: ``step`` again and again until stopped; counts its steps
    and keeps the first error that was not expected."""

    def __init__(self, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.stop = threading.Event()
        self.steps = 0
        self.last_step = time.monotonic()
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.step()
            except BaseException as exc:  # (reported at the end; its trace at once)
                self.error = exc
                traceback.print_exc()
                return
            self.steps += 1
            self.last_step = time.monotonic()

    def step(self) -> None:
        raise NotImplementedError


class Transactions(Worker):
    """Commits transactions of TXN_EVENTS events; records each one's outcome."""

    def __init__(self, manager: StreamManager, scope: str) -> None:
        super().__init__("transactions")
        self.writer = manager.create_transaction_writer(scope, "tx")
        self.outcomes: dict[int, str] = {}  # number -> committed / failed

    def step(self) -> None:
        n = len(self.outcomes)
        txn = self.writer.begin_txn(lease_ms=120_000)
        try:
            txn.write_events([(f"T{n}:{i}", f"k{i % 8}") for i in range(TXN_EVENTS)])
        except TxnFailedError as exc:  # (aborted meanwhile: an application begins another)
            self.outcomes[n] = f"failed: {exc}"
            print(f"transaction {n}: {exc}", flush=True)
            return
        try:
            txn.commit()
            self.outcomes[n] = "committed"
        except Exception as exc:  # (whole or absent: the check says which)
            self.outcomes[n] = f"failed: {exc!r}"
            print(f"transaction {n}: commit failed: {exc!r}", flush=True)
        time.sleep(0.5)


class Counters(Worker):
    """Compare-and-set increments of shared counters; the value is ``{worker: count}`` so a
    worker whose update's answer was lost reads back whether its increment is in."""

    def __init__(self, kvts: KeyValueTableManager, scope: str, name: str) -> None:
        super().__init__(name)
        self.table = kvts.open(scope, "counters")
        self.tally: Counter[bytes] = Counter()
        self.random = random.Random(name)

    def step(self) -> None:
        key = self.random.choice(COUNTERS)
        while True:
            entry = self.table.get(key)
            slots: dict[str, int] = json.loads(entry.value) if entry else {}
            if slots.get(self.name, 0) != self.tally[key]:  # (a lost answer: it was applied)
                self.tally[key] = slots[self.name]
                return
            slots[self.name] = self.tally[key] + 1
            try:
                if entry is None:
                    self.table.insert(key, json.dumps(slots).encode())
                else:
                    self.table.put(key, json.dumps(slots).encode(), version=entry.version)
            except BadKeyVersionError:
                continue
            except Exception:  # (unknown outcome: the next read says)
                time.sleep(0.2)
                continue
            self.tally[key] += 1
            return


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--gap", default="20,40", help="seconds between faults: low,high")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the nodes' data and logs")
    args = parser.parse_args()
    if not ready_for_hosts():
        return 2
    chance = random.Random(args.seed)
    low, high = (float(x) for x in args.gap.split(","))
    where = Path(tempfile.mkdtemp(prefix="millrace-chaos-"))
    print(f"data and logs: {where}", flush=True)
    try:
        with cluster_on_hosts(where) as made:
            cluster, network = made
            return chaos(cluster, network, where, args.minutes, chance, (low, high))
    finally:
        if not args.keep:
            shutil.rmtree(where, ignore_errors=True)


def chaos(
    cluster: LocalCluster, network: PrivateNetwork, where: Path, minutes: float,
    chance: random.Random, gap: tuple[float, float],
) -> int:  # fmt: skip
    run = FaultRun(cluster, network)
    both = ",".join(cluster.base(i) for i in range(len(cluster.http_ports)))
    manager, scope = run.manager, run.scope
    manager.create_stream(scope, "tx", initial_segments=6)
    manager.create_reader_group(scope, "rg", [f"{scope}/st"], reader_timeout_ms=60_000)
    group = manager.reader_group(scope, "rg")
    readers = [Collector(group.create_reader(name)) for name in ("r0", "r1")]
    kvts = KeyValueTableManager(both, token=cluster.token)
    kvts.create_kvt(scope, "counters", partitions=4, primary_key_length=len(COUNTERS[0]))
    workers: list[Worker] = [Transactions(manager, scope)]
    workers += [Counters(kvts, scope, f"kvt-{i}") for i in range(2)]
    tail = Program("resume", SimpleNamespace(base=both, token=cluster.token), f"{scope}/st", where)
    for thread in [*readers, *workers]:
        thread.start()
    faults: Counter[str] = Counter()
    worst: dict[str, float] = {}
    end = time.monotonic() + minutes * 60
    while time.monotonic() < end:
        time.sleep(chance.uniform(*gap))
        fault = chance.choice(FAULTS)
        target = f"controller-{chance.randrange(2)}" if fault == "controller" else (
            f"node-{chance.randrange(3)}"
        )  # fmt: skip
        result = run.apply(fault, target, chance.uniform(5, 15))
        faults[fault] += 1
        stall = result.recovered_s if result.recovered_s is not None else float("inf")
        worst[fault] = max(worst.get(fault, 0.0), stall)
        stuck = [w.name for w in workers if time.monotonic() - w.last_step > 120]
        print(f"{time.strftime('%H:%M:%S')} {result.line()}; stuck: {stuck or 'none'}", flush=True)
    return report(run, manager, scope, readers, workers, tail, faults, worst, kvts)


def report(
    run: FaultRun, manager: StreamManager, scope: str, readers: list[Collector],
    workers: list[Worker], tail: Program, faults: Counter[str], worst: dict[str, float],
    kvts: KeyValueTableManager,
) -> int:  # fmt: skip
    wrong: list[str] = []
    for worker in workers:
        worker.stop.set()
        worker.join(180)
        if worker.is_alive():
            wrong.append(f"{worker.name} is stuck")
        if worker.error is not None:
            wrong.append(f"{worker.name} died: {worker.error!r}")
    wrong += run.finish()  # (the keyed writer flushed and checked)
    manager.seal_stream(scope, "st")
    for reader in readers:
        reader.join(300)
        if reader.is_alive() or reader.error is not None:
            wrong.append(f"reader stuck or failed: {reader.error!r}")
    stored = read_back(manager, scope, "st")
    events = sorted(f"{key}:{n}" for key, numbers in stored.items() for n in numbers)
    group_read = sorted(e for reader in readers for e in reader.seen)
    if group_read != events:
        wrong.append(f"the reader group read {len(group_read)} events of {len(events)}")
    if tail.wait(300) != 0:
        wrong.append("the WebSocket tail did not end cleanly")
    tailed = sorted(line for line in tail.lines() if ":" in line)
    if tailed != events:
        wrong.append(f"the WebSocket tail saw {len(tailed)} events of {len(events)}")
    wrong += check_transactions(manager, scope, workers[0])  # type: ignore[arg-type]
    wrong += check_counters(kvts, scope, workers[1:])  # type: ignore[arg-type]
    print()
    print("faults:", dict(faults))
    print("longest a key went unacknowledged, by fault:",
          {k: round(v, 1) for k, v in worst.items()})  # fmt: skip
    acked = sum(len(v) for v in run.probe.acknowledged().values())
    txns = workers[0].outcomes  # type: ignore[attr-defined]
    committed = sum(1 for v in txns.values() if v == "committed")
    increments = sum(sum(w.tally.values()) for w in workers[1:])  # type: ignore[attr-defined]
    print(f"acknowledged events: {acked}; stored: {len(events)}; transactions committed:"
          f" {committed} of {len(txns)}; counter increments: {increments}")  # fmt: skip
    print("wrong:", wrong or "nothing")
    kvts.close()
    manager.close()  # (before the cluster stops: what it holds leaves cleanly)
    return 1 if wrong else 0


def check_transactions(manager: StreamManager, scope: str, txns: Transactions) -> list[str]:
    manager.seal_stream(scope, "tx")
    stored = read_back(manager, scope, "tx")
    counts: Counter[int] = Counter()
    found: Counter[str] = Counter()
    for key, numbers in stored.items():  # key "T<n>", numbers the events' indexes
        for number in numbers:
            found[f"{key}:{number}"] += 1
        counts[int(key[1:])] = len(numbers)
    wrong = [f"event {e} stored {c} times" for e, c in found.items() if c > 1][:5]
    for n, outcome in txns.outcomes.items():
        present = counts.get(n, 0)
        if outcome == "committed" and present != TXN_EVENTS:
            wrong.append(f"committed transaction {n} has {present} of {TXN_EVENTS} events")
        if outcome != "committed" and present not in (0, TXN_EVENTS):
            wrong.append(f"transaction {n} ({outcome}) is partly there: {present}")
    return wrong


def check_counters(kvts: KeyValueTableManager, scope: str, counters: list[Counters]) -> list[str]:
    table = kvts.open(scope, "counters")
    wrong = []
    for key in COUNTERS:
        entry = table.get(key)
        slots: dict[str, Any] = json.loads(entry.value) if entry else {}
        for worker in counters:
            if slots.get(worker.name, 0) != worker.tally[key]:
                wrong.append(f"{key!r}: {worker.name} counted {worker.tally[key]}, the table"
                             f" has {slots.get(worker.name, 0)}")  # fmt: skip
    return wrong


if __name__ == "__main__":
    sys.exit(main())
