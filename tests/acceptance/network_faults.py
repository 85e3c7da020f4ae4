"""Faults of one node of a cluster whose nodes are hosts of their own, timed as a writer sees them.

Responsibility: ``FaultRun`` holds a cluster (``tests.acceptance.cluster``) whose segment store
nodes run in network namespaces (``tests.acceptance.netns``), a stream spread over them and a
``KeyedProbe`` writing to it through every controller (``http://a:9091,b:9091``). ``apply``
injects one fault into one node, for real, and measures the longest any routing key went
unacknowledged (from the fault to every key acknowledged again, and any later gap until the
cluster settled: the move back to a healed node too), and the rate of the keys whose segments
live on the other nodes while the fault lasted:

* ``partition``: the node's link is down (nothing in or out) for ``seconds``;
* ``pause``: the node is SIGSTOPped for ``seconds``, then SIGCONTinued;
* ``kill``: the node is SIGKILLed, and started again after ``seconds``;
* ``database``: the node alone loses the database (a blackhole route) for ``seconds``: it
  cannot renew, its containers move, its clients still reach it (WrongHost);
* ``asymmetric``: the node keeps the database but cannot reach (nor be reached by) the
  controllers and clients, for ``seconds``: it keeps its containers, its writers cannot append
  and keep trying, and go on once it is healed (timed from the heal);
* ``controller``: the client's first controller is SIGKILLed (``node`` names it,
  ``controller-0``) and started again after ``seconds``; a stream is created meanwhile,
  through the other.

Then the fault is undone and the cluster settles (every container on a live node, served).
What the partition tests and ``bench/failover.py`` share.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from millrace.client.manager import StreamManager
from millrace.client.routing import key_point
from millrace.kernel.naming import container_for
from tests.acceptance.cluster import LocalCluster
from tests.acceptance.keyed_probe import KeyedProbe, check, read_back
from tests.acceptance.netns import PrivateNetwork, available
from tests.acceptance.postgres import private_postgres
from tests.acceptance.standalone_node import eventually, request

__all__ = ["FAULTS", "FaultResult", "FaultRun", "cluster_on_hosts", "ready_for_hosts"]

FAULTS = ("partition", "pause", "kill", "database", "asymmetric", "controller")
#: Seconds before a fault over which each key's usual rate is measured.
BEFORE_SECONDS = 4.0


@dataclasses.dataclass
class FaultResult:
    fault: str
    node: str
    #: The longest any key went unacknowledged from the fault (the heal, for ``asymmetric``)
    #: until the cluster settled: from the fault to every key acknowledged again.
    recovered_s: float | None
    #: Keys never acknowledged in that time.
    stuck: list[str]
    #: The healthy nodes' keys: their rate during the fault over their rate before (lowest).
    healthy_ratio: float
    #: The fault's keys (on the victim) and the others.
    victim_keys: list[str]
    healthy_keys: list[str]
    #: Per key, the longest it went unacknowledged.
    stalls: dict[str, float]

    def line(self) -> str:
        took = "never" if self.recovered_s is None else f"{self.recovered_s:5.1f} s"
        return (
            f"{self.fault:<10} {self.node}: longest a key went unacknowledged {took};"
            f" healthy keys kept {self.healthy_ratio:.0%} of their rate"
            f" ({len(self.victim_keys)} keys on the node, {len(self.healthy_keys)} elsewhere)"
        )


def ready_for_hosts() -> bool:
    """For a bench: SIGTERM ends it as Ctrl-C does (the hosts, the cluster and PostgreSQL are
    removed); ``False``, saying why on stderr, where network namespaces cannot be made."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    why = available()
    if why is not None:
        print(f"network namespaces cannot be made here: {why}", file=sys.stderr)
    return why is None


@contextlib.contextmanager
def cluster_on_hosts(where: Path, hosts: int = 3) -> Iterator[tuple[LocalCluster, PrivateNetwork]]:
    """A private network of ``hosts`` hosts, a PostgreSQL server of its own listening on it, and
    a cluster in ``where`` whose segment store nodes run one per host; all removed at the end."""
    with PrivateNetwork(hosts) as network:
        postgres = private_postgres(also=(network.database, f"{network.subnet}.0/24"))
        server = next(postgres)
        try:
            running = LocalCluster(where, server.url, network=network).running()
            try:
                yield next(running), network
            finally:
                running.close()
        finally:
            postgres.close()


class FaultRun:
    """A stream over the cluster's nodes and a probe writing to it (see the module)."""

    def __init__(
        self, cluster: LocalCluster, network: PrivateNetwork | None, *, segments: int = 12,
        keys: int = 24, rate: float = 2000.0,
    ) -> None:  # fmt: skip
        self.cluster, self.network = cluster, network
        controllers = ",".join(cluster.base(i) for i in range(len(cluster.http_ports)))
        self.manager = StreamManager(controllers, token=cluster.token)
        self.scope, self.stream = f"n{uuid.uuid4().hex[:8]}", "st"
        self.manager.create_scope(self.scope)
        self.manager.create_stream(self.scope, self.stream, initial_segments=segments)
        self.probe = KeyedProbe(self.manager, self.scope, self.stream, keys=keys, rate=rate)
        self.probe.start()
        self.wait_all_keys(time.monotonic(), 60)
        time.sleep(BEFORE_SECONDS)  # (the usual rate, measured before the first fault)
        #: The controller the cluster's state is asked of (another once one is killed).
        self.via = 0

    def wait_all_keys(self, since: float, timeout: float) -> dict[str, float | None]:
        """Until every key is acknowledged for an event written after ``since`` (or
        ``timeout``); what ``recovered_after`` says then."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.probe.recovered_after(since)
            if all(v is not None for v in found.values()) or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def keys_by_node(self) -> dict[str, list[str]]:
        """Node -> the routing keys whose segment it serves now."""
        path = f"/v1/scopes/{self.scope}/streams/{self.stream}/segments"
        status, answer = request(self.cluster.base(self.via), "GET", path, self.cluster.token)
        assert status == 200, answer
        owners = self.cluster.owners(self.via)
        found: dict[str, list[str]] = {}
        for key in self.probe.keys:
            point = key_point(key)
            name = next(
                s["name"] for s in answer["segments"] if s["keyStart"] <= point < s["keyEnd"]
            )
            found.setdefault(owners[container_for(name, self.cluster.containers)], []).append(key)
        return found

    def victim(self) -> str:
        """The node serving the most keys."""
        by_node = self.keys_by_node()
        return max(sorted(by_node), key=lambda node: len(by_node[node]))

    def apply(self, fault: str, node: str, seconds: float) -> FaultResult:
        """Inject ``fault`` into ``node`` for ``seconds``, undo it, let the cluster settle, and
        measure: the longest any key went unacknowledged from the fault (from the heal, for the
        asymmetric cut: until then its keys wait, by design) until the cluster settled, and the
        other nodes' keys' rate while the fault lasted."""
        i = int(node.rsplit("-", 1)[1])
        if fault == "controller":
            self.via = 1 - i
        by_node = self.keys_by_node()
        victim_keys = by_node.get(node, [])
        healthy = [k for n, keys in by_node.items() if n != node for k in keys]
        start = time.monotonic()
        self._inject(fault, i)
        time.sleep(seconds)
        self._undo(fault, i)
        undone = time.monotonic()
        self.settle()
        end = time.monotonic()
        since = undone if fault == "asymmetric" else start
        stalls = {key: self.probe.longest_stall(key, since, end) for key in self.probe.keys}
        stuck = [key for key, stall in stalls.items() if stall >= end - since]
        ratio = min(
            (self.probe.rate(k, start, undone) / max(self._before(k, start), 1e-9)
             for k in healthy),
            default=1.0,
        )  # fmt: skip
        return FaultResult(
            fault, node, None if stuck else max(stalls.values()), stuck, ratio, victim_keys,
            healthy, stalls,
        )  # fmt: skip

    def _before(self, key: str, start: float) -> float:
        return self.probe.rate(key, start - BEFORE_SECONDS, start)

    def _inject(self, fault: str, i: int) -> None:
        process = self.cluster.processes[f"node-{i}"]
        assert self.network is not None or fault in ("pause", "kill", "controller")
        if fault == "controller":
            self.cluster.processes[f"controller-{i}"].kill()
            made = self.manager.create_stream(self.scope, f"s{uuid.uuid4().hex[:6]}", 1)
            assert made, "no stream made while the first controller is down"
        elif fault == "partition":
            self.network.cut(i)
        elif fault == "pause":
            process.signal(signal.SIGSTOP)
        elif fault == "kill":
            process.kill()
        elif fault == "database":
            self.network.blackhole(i, self.network.database)
        elif fault == "asymmetric":
            self.network.blackhole(i, self.network.gateway)
        else:
            raise ValueError(f"unknown fault {fault!r} (known: {', '.join(FAULTS)})")

    def _undo(self, fault: str, i: int) -> None:
        if fault == "controller":
            self.cluster.start_controller(i)
            eventually(lambda: self.cluster.answers(i), 60, f"controller-{i} answering")
        elif fault == "partition":
            self.network.heal(i)
        elif fault == "pause":
            self.cluster.processes[f"node-{i}"].signal(signal.SIGCONT)
        elif fault == "kill":
            self.cluster.start_node(i)
        elif fault == "database":
            self.network.unblackhole(i, self.network.database)
        elif fault == "asymmetric":
            self.network.unblackhole(i, self.network.gateway)

    def settle(self, timeout: float = 120) -> None:
        """Every container on a live node and served by it, every key acknowledged since."""
        eventually(lambda: self.cluster.spread(via=self.via), timeout, "containers on every node")
        eventually(lambda: self.cluster.settled(self.via), timeout, "containers served")
        since = time.monotonic()
        found = self.wait_all_keys(since, timeout)
        stuck = [k for k, v in found.items() if v is None]
        assert not stuck, f"keys not acknowledged after the cluster settled: {stuck}"

    def finish(self) -> list[str]:
        """Stop the probe (flush), read the stream back: what is wrong (``[]``: nothing)."""
        self.probe.stop()
        wrong = check(self.probe.acknowledged(), read_back(self.manager, self.scope, self.stream))
        errors = self.probe.errors
        if errors:
            wrong.append(f"{len(errors)} events failed, e.g. {errors[0]!r}")
        return wrong

    def close(self) -> None:
        self.manager.close()


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if len(known) == len(values) and known else None
