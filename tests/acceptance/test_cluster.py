"""A three-node cluster of whole processes, its nodes and its leader killed under load.

On a PostgreSQL server of the test's own (skipped with a notice where the machine has none):
three segment store nodes on shared tiers (a shared directory, the one-host stand-in), two
controllers, a worker and two beats (``tests.acceptance.cluster``). Two event writers, a
transactional writer and two reader-group readers (``e2e_roles``, the Python client as a user
runs it, with a token), the README's WebSocket tail (``resume.py``) and a Spark ingest
(``millrace ingest``) run throughout, against the controller that does not lead. Meanwhile:

* SIGKILL a segment store node: its containers are assigned to the two others, recovered from
  the shared tiers, and the clients follow them by themselves (WrongHost, a lost connection:
  they look the node up again);
* start it again: containers are balanced back onto it;
* SIGKILL the leading controller: the other takes the lease; REST through it goes on, and a
  scale asked just before the kill completes;
* SIGSTOP a node until its containers have moved, SIGCONT it: it acknowledges nothing for them
  (it was paused: it serves nothing until it renewed, and then stops what it lost) and rejoins.

Then every event acknowledged is read exactly once, in order per routing key, each committed
transaction whole and each aborted one absent, and the tail has every event once. The append
sent to the stopped node is neither acknowledged nor stored.

Each guard is also switched off, in a scenario where it alone stands between the client and a
wrong answer: a node cut off from the database keeps its clients while its containers move,
and the new owner's fence refuses its appends (``no-fencing``: it acknowledges one); a node
woken from a pause, still cut off, serves nothing (``no-pause-check``: it answers from its
stale state); a node answers WrongHost for a container it gave up (``no-wrong-host``: the
clients are told their segment is gone and the run fails). And: PostgreSQL stopped for 20 s
moves nothing; a JetStream tier-1 cluster. (``millrace cluster local`` as a user types it: the
cluster guide's executed test, ``tests/acceptance/test_guides.py``.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from millrace.client.errors import ContainerOfflineError
from millrace.client.events import encode_event
from millrace.client.manager import StreamManager
from millrace.client.transport.sync import SyncSegmentStoreClient
from millrace.kernel import wire
from millrace.kernel.claims import READ_UPDATE, mint_token
from millrace.kernel.naming import container_for
from tests.acceptance.cluster import LocalCluster, wire_call
from tests.acceptance.e2e_roles import KEYS_PER_WRITER, TXN_EVENTS, spawn
from tests.acceptance.faulty_proxy import FaultyProxy
from tests.acceptance.postgres import PrivatePostgres
from tests.acceptance.standalone_node import eventually, request
from tests.acceptance.test_node_heals import Program
from tests.tiers.nats_servers import nats_servers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]

WRITERS, READERS = 2, 2
PER_WRITER = 6000
WRITE_RATE = 250.0
#: From a node's SIGKILL to its containers assigned elsewhere and served: the session timeout
#: (5 s), a renewal (1 s), recovery; generous for a loaded 2-core machine.
FAILOVER_SECONDS = 30
#: The cluster's session timeout (``MILLRACE_NODE_SESSION_TIMEOUT_S``'s default).
SESSION_TIMEOUT_SECONDS = 5
OUTAGE_SECONDS = 20.0


class Run:
    """The client processes of one run, and what they wrote."""

    def __init__(
        self,
        cluster: LocalCluster,
        base: str,
        where: Path,
        spark: bool = True,
        per_writer: int = PER_WRITER,
    ) -> None:
        self.cluster, self.base, self.where = cluster, base, where
        self.per_writer = per_writer
        self.scope = f"c{uuid.uuid4().hex[:8]}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        manager = StreamManager(base, token=cluster.token)
        manager.create_scope(self.scope)
        manager.create_stream(self.scope, "st", initial_segments=6)
        manager.create_stream(self.scope, "probe", initial_segments=32)  # (some on every node)
        #: (acknowledged, in the segment) of the append sent to the stopped node.
        self.probe = (False, False)
        manager.create_reader_group(
            self.scope,
            "rg",
            [f"{self.scope}/st"],
            reader_timeout_ms=30_000,
            group_refresh_time_ms=200,
        )
        manager.close()
        token = cluster.token
        for i in range(READERS):
            self.procs[f"r{i}"] = spawn(
                where,
                f"r{i}",
                "reader",
                base,
                token,
                self.scope,
                "rg",
                f"r{i}",
                str(where / f"r{i}.log"),
            )
        for i in range(WRITERS):
            self.procs[f"w{i}"] = spawn(
                where,
                f"w{i}",
                "writer",
                base,
                token,
                self.scope,
                str(i),
                str(per_writer),
                str(WRITE_RATE),
                str(where / f"w{i}.json"),
            )
        # The README's resume.py follows the stream over a WebSocket of the same controller.
        self.tail = Program("resume", SimpleNamespace(base=base, token=token), f"{self.scope}/st",
                            where)  # fmt: skip
        self.procs["tail"] = self.tail.process
        self.spark = None
        if spark and shutil.which("java"):
            self.spark = SparkIngest(cluster, base, self.scope, where)
        elif spark:
            print("no java on this machine: the Spark ingest is left out of the run")
        self.stopfile = where / "txn.stop"
        self.procs["txn"] = spawn(
            where, "txn", "txn", base, token, self.scope, str(where / "txn.log"), str(self.stopfile)
        )

    def written(self) -> int:
        total = 0
        for i in range(WRITERS):
            with contextlib.suppress(OSError, ValueError):
                total += int((self.where / f"w{i}.json.progress").read_text() or 0)
        return total

    def committed(self) -> int:
        """Transactions the transaction writer has committed so far."""
        with contextlib.suppress(OSError):
            return (self.where / "txn.log").read_text().split().count("C")
        return 0

    def wait_committed(self, count: int, timeout: float) -> None:
        """Until the transaction writer has committed ``count`` transactions."""
        try:
            eventually(lambda: self.committed() >= count, timeout, f"{count} commits")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.stderr('txn')}") from None

    def wait_written(self, fraction: float, timeout: float = 300) -> None:
        def far_enough() -> bool:
            for name, proc in self.procs.items():
                assert proc.poll() in (None, 0), self.stderr(name)
            return self.written() >= fraction * WRITERS * self.per_writer

        eventually(far_enough, timeout, f"the writers writing {fraction:.0%}")

    def stderr(self, name: str) -> str:
        return (self.where / f"{name}.stderr").read_text(errors="replace")[-3000:]

    def finish(self) -> None:
        """Writers done, the transactions stopped, the stream sealed, the readers done."""
        for i in range(WRITERS):
            assert self.procs[f"w{i}"].wait(300) == 0, self.stderr(f"w{i}")
        self.stopfile.write_text("stop")
        assert self.procs["txn"].wait(120) == 0, self.stderr("txn")
        status, answer = request(
            self.base,
            "PUT",
            f"/v1/scopes/{self.scope}/streams/st/state",
            self.cluster.token,
            {"streamState": "SEALED"},
        )
        assert status == 200, answer
        for i in range(READERS):
            try:
                code = self.procs[f"r{i}"].wait(300)
            except subprocess.TimeoutExpired:
                self.fail_stuck(f"r{i}")
            assert code == 0, self.stderr(f"r{i}")
        assert self.tail.wait(120) == 0, self.tail.err.read_text()[-3000:]
        (self.where / "tail.lines").write_text("\n".join(self.tail.lines()))
        if self.spark is not None:
            self.spark.check()

    def fail_stuck(self, name: str) -> None:
        """Fail with the group's state as the controller has it, and the stuck reader's asyncio
        tasks and stderr (it dumps them on SIGUSR1)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.procs[name].pid, signal.SIGUSR1)
        time.sleep(2)
        group = request(self.base, "GET", f"/v1/scopes/{self.scope}/readergroups/rg",
                        self.cluster.token)  # fmt: skip
        stderr = (self.where / f"{name}.stderr").read_text(errors="replace")[-20_000:]
        pytest.fail(f"{name} did not finish in 300 s; the group: {group}\n{stderr}")

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


class SparkIngest:
    """``millrace ingest`` of a JSON file into ``<scope>/spark`` with a local Spark job, as a
    user types it, running while the nodes and the leader fail; then every row is in the stream
    exactly once."""

    ROWS = 20_000

    def __init__(self, cluster: LocalCluster, base: str, scope: str, where: Path) -> None:
        self.base, self.token, self.scope = base, cluster.token, scope
        rows = where / "spark-in"
        rows.mkdir()
        (rows / "rows.json").write_text("".join(
            json.dumps({"key": f"s{i % 16}", "event": f"spark-{i}"}) + "\n"
            for i in range(self.ROWS)
        ))  # fmt: skip
        self.out = where / "spark.out"
        with open(self.out, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "millrace.ops.cli", "ingest", str(rows), "--format", "json",
                 "--stream", f"{scope}/spark", "--create", "--segments", "4",
                 "--key-column", "key", "--event-column", "event",
                 "--url", base, "--token", cluster.token],
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
            )  # fmt: skip

    def check(self) -> None:
        assert self.process.wait(600) == 0, self.out.read_text()[-3000:]
        assert f"ingested into {self.scope}/spark: {self.ROWS:,} events" in self.out.read_text()
        manager = StreamManager(self.base, token=self.token)
        reader = manager.create_reader(self.scope, "spark")
        events: list[str] = []
        while len(events) < self.ROWS:
            batch = reader.read_batch(4096, timeout=10)
            assert batch, f"the stream has {len(events)} of the {self.ROWS} rows"
            events += [bytes(e.data).decode() for e in batch]
        manager.close()
        assert sorted(events) == sorted(f"spark-{i}" for i in range(self.ROWS))


@pytest.fixture(scope="module")
def shared_cluster(
    module_postgres: PrivatePostgres,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Any:
    """A cluster shared by the module's tests that ask for it with the same switches
    (``request.param``, none by default), each instance on a database of its own on the
    module's PostgreSQL server."""
    where = tmp_path_factory.mktemp("cluster")
    database = f"{module_postgres.url.rsplit('/', 1)[0]}/c{uuid.uuid4().hex[:8]}"
    yield from LocalCluster(where, database, unsafe=getattr(request, "param", "")).running()


@pytest.fixture
def cluster(shared_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The module's cluster, left as the test found it (``LocalCluster.restore``)."""
    yield shared_cluster
    shared_cluster.restore()


#: The tests that share the module's cluster keep to one worker.
shares_the_cluster = pytest.mark.xdist_group("cluster")


def _leader_and_follower(cluster: LocalCluster) -> tuple[str, int]:
    """The controller process that leads, and the index of the one that does not."""
    holder = eventually(cluster.leader, 30, "a leader")
    pid = int(holder.split("#", 1)[1].split("-", 1)[0])  # (<node id>#<pid>-<random>)
    for i in range(len(cluster.http_ports)):
        process = cluster.processes[f"controller-{i}"]
        assert process.popen is not None
        if process.popen.pid == pid:
            return f"controller-{i}", 1 - i
    raise AssertionError(f"no controller process has pid {pid} ({holder})")


@shares_the_cluster
def test_nodes_and_the_leader_fail_under_load_and_nothing_is_lost(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    leading, other = _leader_and_follower(cluster)
    run = Run(cluster, cluster.base(other), tmp_path)
    try:
        _scenario(cluster, run, leading, other)
        run.finish()
    finally:
        run.kill_all()
    # The woken node acknowledged nothing and wrote nothing for the container it lost.
    assert run.probe == (False, False), run.probe
    took = [n for n in ("beat-0", "beat-1") if "took the beat lease" in cluster.output(n)]
    assert len(took) == 1, took  # one beat ticks, the other stands by
    check(tmp_path)


def _scenario(cluster: LocalCluster, run: Run, leading: str, other: int) -> None:
    nodes = {f"node-{i}" for i in range(3)}
    # 1. SIGKILL a node: its containers move to the others.
    run.wait_written(0.15)
    cluster.processes["node-1"].kill()
    eventually(lambda: cluster.spread(nodes - {"node-1"}), FAILOVER_SECONDS, "failover")
    # 2. Start it again: containers are balanced back onto it.
    run.wait_written(0.35)
    cluster.start_node(1)
    eventually(lambda: cluster.spread(nodes), FAILOVER_SECONDS, "rebalance onto node-1")
    # 3. A scale asked through the follower, then SIGKILL the leading controller.
    run.wait_written(0.55)
    status, answer = request(
        cluster.base(other), "GET", f"/v1/scopes/{run.scope}/streams/st/segments", cluster.token
    )
    assert status == 200, answer
    first = min(answer["segments"], key=lambda s: s["keyStart"])
    middle = (first["keyStart"] + first["keyEnd"]) / 2
    status, answer = request(
        cluster.base(other),
        "POST",
        f"/v1/scopes/{run.scope}/streams/st/scale",
        cluster.token,
        {
            "sealedSegments": [first["segmentId"]],
            "newRanges": [[first["keyStart"], middle], [middle, first["keyEnd"]]],
        },
    )
    assert status == 200, answer
    killed = cluster.processes[leading].popen
    assert killed is not None
    cluster.processes[leading].kill()
    holder = eventually(  # (a holder is "<node id>#<pid>-<random>")
        lambda: (found := _leader_of(cluster, other)) and f"#{killed.pid}-" not in found and found,
        FAILOVER_SECONDS,
        "the other controller taking the lease",
    )
    assert holder
    eventually(lambda: _segments(cluster, other, run.scope) == 7, 120, "the scale completing")
    # 4. SIGSTOP a node until its containers moved, then SIGCONT it: it rejoins. An append
    #    sent to it while it is stopped, on a connection held open, tells what it does when
    #    it wakes.
    run.wait_written(0.75)
    paused = cluster.processes["node-2"]
    probe = Probe(cluster, run.base, run.scope, "node-2", other)
    paused.signal(signal.SIGSTOP)
    probe.send()
    try:
        eventually(
            lambda: cluster.spread(nodes - {"node-2"}, other),
            FAILOVER_SECONDS,
            "failover from the paused node",
        )
    finally:
        paused.signal(signal.SIGCONT)
    eventually(lambda: cluster.spread(nodes, other), FAILOVER_SECONDS, "the paused node rejoining")
    run.probe = probe.outcome(other)


class Probe:
    """An append to ``node``'s container sent after the container moved (the node stopped or
    cut off meanwhile): acknowledged or not, and whether its event is then in the segment
    (read from its new owner)."""

    EVENT = b"probe-event"

    def __init__(self, cluster: LocalCluster, base: str, scope: str, node: str, via: int) -> None:
        self.cluster = cluster
        status, answer = request(base, "GET", f"/v1/scopes/{scope}/streams/probe/segments",
                                 cluster.token)  # fmt: skip
        assert status == 200, answer
        owners = cluster.owners(via)
        names = [s["name"] for s in answer["segments"]]
        self.segment = next(
            n for n in names if owners[container_for(n, cluster.containers)] == node
        )
        self.token = mint_token(cluster.env["MILLRACE_TOKEN_SECRET"], "*", READ_UPDATE, 3600)
        port = cluster.node_ports[int(node.rsplit("-", 1)[1])]
        # (no liveness watch: the probe holds its connection across a pause of the node, as a
        # client that never gives up would; what the node answers then is what is checked)
        self.client = SyncSegmentStoreClient("127.0.0.1", port, delegation_token=self.token,
                                             timeout=120, silence_s=0)  # fmt: skip
        self.writer = uuid.uuid4()
        eventually(self._set_up, FAILOVER_SECONDS, f"{node} serving {self.segment}")

    def _set_up(self) -> bool:
        """The append session, once the node runs the container (assigned is not started)."""
        try:
            self.client.setup_append(self.segment, self.writer)
        except ContainerOfflineError:
            return False
        return True

    def send(self) -> None:
        self.ack = self.client.append_block(self.writer, [encode_event(self.EVENT)], raw=True)

    def outcome(self, via: int) -> tuple[bool, bool]:
        """(acknowledged, in the segment)."""
        try:
            self.ack.result(timeout=60)
            acknowledged = True
        except Exception:
            acknowledged = False
        finally:
            self.client.close()
        (data,) = eventually(lambda: self._read(via), FAILOVER_SECONDS, f"{self.segment} served")
        return acknowledged, self.EVENT in data

    def _read(self, via: int) -> tuple[bytes] | None:
        """The segment's bytes from its owner now; None while it does not serve it yet."""
        reader = SyncSegmentStoreClient(*_node_of(self.cluster, via, self.segment),
                                        delegation_token=self.token)  # fmt: skip
        try:
            return (bytes(reader.read_segment(self.segment, 0, 1 << 20, token=self.token).data),)
        except ContainerOfflineError:
            return None
        finally:
            reader.close()


def _node_of(cluster: LocalCluster, via: int, segment: str) -> tuple[str, int]:
    owner = cluster.owners(via)[container_for(segment, cluster.containers)]
    return "127.0.0.1", cluster.node_ports[int(owner.rsplit("-", 1)[1])]


def _leader_of(cluster: LocalCluster, i: int) -> str | None:
    try:
        found = cluster.status(i)["leader"]
    except OSError:
        return None
    return None if found is None else str(found["holder"])


def _segments(cluster: LocalCluster, i: int, scope: str) -> int:
    status, answer = request(
        cluster.base(i), "GET", f"/v1/scopes/{scope}/streams/st/segments", cluster.token
    )
    return len(answer["segments"]) if status == 200 else -1


def _read_log(path: Path) -> list[tuple[int, str, int, str]]:
    out = []
    for line in path.read_text().splitlines():
        parts = line.split(" ", 3)
        if not line.startswith("#") and len(parts) == 4:
            out.append((int(parts[0]), parts[1], int(parts[2]), parts[3]))
    return out


def check(where: Path) -> None:
    """Every event acknowledged read once, per key in order; transactions whole or absent."""
    written: dict[str, int] = {}
    for i in range(WRITERS):
        written.update(json.loads((where / f"w{i}.json").read_text()))
    assert len(written) == WRITERS * KEYS_PER_WRITER
    read: dict[str, list[int]] = defaultdict(list)  # data -> when each reader handed it out
    for i in range(READERS):
        for when, _segment, _offset, data in _read_log(where / f"r{i}.log"):
            read[data].append(when)
    twice = [data for data, whens in read.items() if len(whens) > 1]
    assert not twice, f"{len(twice)} events read twice, e.g. {twice[:5]}"
    for key, count in written.items():
        missing = [n for n in range(count) if f"{key}:{n}" not in read]
        assert not missing, (
            f"{key}: {len(missing)} acknowledged events never read, e.g. {missing[:5]}"
        )
        times = [read[f"{key}:{n}"][0] for n in range(count)]
        assert times == sorted(times), f"{key} read out of order"
    outcomes = dict(
        (int(n), kind)
        for kind, n in (line.split() for line in (where / "txn.log").read_text().splitlines())
    )
    assert list(outcomes.values()).count("C") >= 3, outcomes
    for n, kind in outcomes.items():
        present = sum(f"T{n}:{i}" in read for i in range(TXN_EVENTS))
        assert present in {"C": {TXN_EVENTS}, "A": {0}, "F": {0, TXN_EVENTS}}[kind], (n, kind)
    tailed = sorted(line for line in (where / "tail.lines").read_text().splitlines()
                    if line.startswith("w"))  # fmt: skip
    assert tailed == sorted(f"{k}:{n}" for k, c in written.items() for n in range(c)), (
        "the WebSocket tail missed or repeated events"
    )
    print(
        f"cluster: {sum(written.values())} events written, {len(read)} distinct read, "
        f"{len(outcomes)} transactions"
    )


@shares_the_cluster
@pytest.mark.parametrize("shared_cluster", ["no-wrong-host"], indirect=True)
def test_without_wrong_host_the_clients_cannot_follow_a_moved_container(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """WrongHost switched off (``no-wrong-host``): a node answers a container it gave up as a
    missing segment. A node is killed, then started again; when containers are balanced back
    onto it, the writers and readers still talking to their old owners are told their segment
    is gone, and the run fails (the same steps pass in the test above)."""
    # Writing for twice as long (48 s) as the test above: the containers must move back while
    # the writers still write, even on a slow, loaded machine.
    run = Run(cluster, cluster.base(0), tmp_path, spark=False, per_writer=2 * PER_WRITER)
    nodes = {f"node-{i}" for i in range(3)}
    try:
        run.wait_written(0.1)
        cluster.processes["node-1"].kill()
        eventually(lambda: cluster.spread(nodes - {"node-1"}), FAILOVER_SECONDS, "failover")
        cluster.start_node(1)
        eventually(lambda: cluster.spread(nodes), FAILOVER_SECONDS, "rebalance")
        assert run.written() < WRITERS * run.per_writer, "all written before the containers moved"
        with pytest.raises((AssertionError, subprocess.TimeoutExpired)):
            for i in range(WRITERS):  # (guarded, they are done within 2 minutes: 48 s of writes)
                run.procs[f"w{i}"].wait(150)
            run.finish()
            check(tmp_path)
    finally:
        run.kill_all()


@shares_the_cluster
def test_a_database_outage_moves_no_container_and_appends_go_on(
    cluster: LocalCluster, module_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    """PostgreSQL stopped for 20 s (four session timeouts): nobody can renew, and nobody is
    judged gone; the writers' appends are acknowledged throughout; once it is back, the leader
    watches a whole timeout before it would call anyone gone, every node renews meanwhile, and
    transactions (which need the database) commit again."""
    _, other = _leader_and_follower(cluster)
    owners, moves = cluster.owners(other), len(cluster.status(other)["moves"])
    run = Run(cluster, cluster.base(other), tmp_path)
    try:
        run.wait_written(0.1)
        module_postgres.stop()
        try:
            before = run.written()
            time.sleep(OUTAGE_SECONDS)
            during = run.written() - before
        finally:
            module_postgres.start()
        assert during >= WRITE_RATE * OUTAGE_SECONDS / 2, f"{during} events written in the outage"
        time.sleep(2 * SESSION_TIMEOUT_SECONDS)
        assert eventually(lambda: _status_or_none(cluster, other), 60, "REST answering again")
        assert cluster.owners(other) == owners
        assert len(cluster.status(other)["moves"]) == moves
        run.wait_committed(run.committed() + 3, 120)  # transactions go on with the database back
        run.finish()
    finally:
        run.kill_all()
    check(tmp_path)


def _status_or_none(cluster: LocalCluster, i: int) -> dict[str, Any] | None:
    try:
        return cluster.status(i)
    except OSError:
        return None


def test_on_jetstream_a_killed_nodes_containers_are_recovered_from_the_replicated_log(
    postgres: PrivatePostgres, tmp_path: Path
) -> None:
    """Tier-1 on a three-server JetStream cluster (replicas 3), the tier safe across hosts: a
    node is SIGKILLed under load and started again; its containers are recovered by the others
    from JetStream, then balanced back, and nothing acknowledged is lost or duplicated."""
    with nats_servers(tmp_path / "nats", 3) as servers:
        options = json.dumps({"servers": [s.url for s in servers], "replicas": 3})
        cluster = LocalCluster(tmp_path / "cluster", postgres.url, controllers=1,
                               environ={"MILLRACE_TIER1": "jetstream",
                                        "MILLRACE_TIER1_OPTIONS": options})  # fmt: skip
        where = tmp_path / "run"
        where.mkdir()
        try:
            cluster.start()
            run = Run(cluster, cluster.base(0), where, spark=False)
            try:
                nodes = {f"node-{i}" for i in range(3)}
                run.wait_written(0.2)
                cluster.processes["node-0"].kill()
                eventually(lambda: cluster.spread(nodes - {"node-0"}), FAILOVER_SECONDS,
                           "failover")  # fmt: skip
                run.wait_written(0.5)
                cluster.start_node(0)
                eventually(lambda: cluster.spread(nodes), FAILOVER_SECONDS, "rebalance")
                run.finish()
            finally:
                run.kill_all()
        finally:
            cluster.close()
    check(where)


@pytest.mark.parametrize("unsafe", ["", "no-fencing"])
def test_a_node_cut_off_from_the_database_is_fenced_once_its_containers_move(
    postgres: PrivatePostgres, tmp_path: Path, unsafe: str
) -> None:
    """Node 2 reaches PostgreSQL through a proxy, which then refuses it: the node cannot renew,
    serves on (the database may be what is down), and its clients stay connected. The leader
    moves its containers; once their new owner runs them, an append sent to node 2 is not
    acknowledged and not stored: the new owner's tier-1 epoch fences it, and so is an update of
    a table segment of that container (the new owner serves the value from before). With
    fencing switched off (``no-fencing``) node 2 acknowledges both, though the container is no
    longer its own."""
    with _node_2_behind_a_proxy(postgres, tmp_path, unsafe) as (cluster, proxy, probe):
        container = container_for(probe.segment, cluster.containers)
        table = TableProbe(cluster, "node-2", container, probe.token)
        marks = {name: len(cluster.output(name)) for name in ("node-0", "node-1")}
        proxy.refuse(True)
        eventually(lambda: cluster.spread({"node-0", "node-1"}), FAILOVER_SECONDS,
                   "the cut-off node's containers moving")  # fmt: skip
        owner = cluster.owners(0)[container]
        cluster.wait_for_line(owner, f"container {container} running at epoch", FAILOVER_SECONDS,
                              after=marks[owner])  # fmt: skip
        probe.send()
        acknowledged, stored = probe.outcome(0)
        table_acknowledged, value = table.stale_update(owner)
    if unsafe:
        assert acknowledged, "unguarded, the cut-off node acknowledges for a container it lost"
        assert table_acknowledged, "unguarded, it acknowledges a table update there too"
    else:
        assert (acknowledged, stored) == (False, False)
        assert (table_acknowledged, value) == (False, b"before")


class TableProbe:
    """A table segment of ``node``'s container ``container``, written through the node before it
    is cut off; then an update sent to it after the container moved: acknowledged or not, and
    the value the new owner serves."""

    def __init__(self, cluster: LocalCluster, node: str, container: int, token: str) -> None:
        self.cluster, self.token = cluster, token
        self.name = next(
            name for i in range(10_000)
            if container_for(name := f"probed/t{i}_kvtable/0.#epoch.0", cluster.containers)
            == container
        )  # fmt: skip
        self.port = cluster.node_ports[int(node.rsplit("-", 1)[1])]
        created = wire_call(self.port, wire.CreateTableSegment(1, self.name, token))
        assert isinstance(created, wire.SegmentCreated), created
        assert isinstance(self._update(self.port, b"before"), wire.TableEntriesUpdated)

    def _update(self, port: int, value: bytes) -> object:
        entry = (wire.TableKey(b"k", wire.KEY_NO_VERSION), wire.TableValue(value))
        return wire_call(port, wire.UpdateTableEntries(2, self.name, self.token, (entry,), -1))

    def stale_update(self, owner: str) -> tuple[bool, bytes]:
        reply = self._update(self.port, b"stale")
        port = self.cluster.node_ports[int(owner.rsplit("-", 1)[1])]
        read = eventually(
            lambda: isinstance(
                found := wire_call(port, wire.ReadTable(3, self.name, self.token,
                                                         (wire.TableKey(b"k"),))),
                wire.TableRead,
            ) and found,
            FAILOVER_SECONDS, f"{owner} serving {self.name}",
        )  # fmt: skip
        return isinstance(reply, wire.TableEntriesUpdated), read.entries[0][1].data


@pytest.mark.parametrize("unsafe", ["", "no-pause-check"])
def test_a_node_woken_from_a_pause_serves_nothing_until_it_has_renewed(
    postgres: PrivatePostgres, tmp_path: Path, unsafe: str
) -> None:
    """Node 2 is SIGSTOPped and, while it sleeps, cut off from PostgreSQL (so that it cannot
    renew when it wakes); its containers move and the new owner takes an append. Woken, node 2
    is asked about the segment: it answers WrongHost (it was paused, it has not renewed). With
    the pause check switched off (``no-pause-check``) it answers from its stale state: a
    length short of the segment's real one."""
    with _node_2_behind_a_proxy(postgres, tmp_path, unsafe) as (cluster, proxy, probe):
        paused = cluster.processes["node-2"]
        paused.signal(signal.SIGSTOP)
        proxy.refuse(True)
        try:
            eventually(lambda: cluster.spread({"node-0", "node-1"}), FAILOVER_SECONDS,
                       "the paused node's containers moving")  # fmt: skip
            owner = SyncSegmentStoreClient(*_node_of(cluster, 0, probe.segment),
                                           delegation_token=probe.token)  # fmt: skip
            writer = uuid.uuid4()
            eventually(lambda: _set_up(owner, probe.segment, writer), FAILOVER_SECONDS,
                       "the new owner serving the segment")  # fmt: skip
            owner.append_block(writer, [encode_event(b"at the new owner")], raw=True).result(30)
            length = owner.get_info(probe.segment).write_offset
            owner.close()
        finally:
            paused.signal(signal.SIGCONT)
        try:
            stale = probe.client.get_info(probe.segment).write_offset
        except ContainerOfflineError as exc:
            answer: Any = exc
        else:
            answer = stale
    if unsafe:
        assert answer == 0 < length, f"unguarded, the woken node answers its stale {answer}"
    else:
        assert isinstance(answer, ContainerOfflineError) and "paused" in str(answer), answer


def _set_up(client: SyncSegmentStoreClient, segment: str, writer: uuid.UUID) -> bool:
    try:
        client.setup_append(segment, writer)
    except ContainerOfflineError:
        return False
    return True


@contextlib.contextmanager
def _node_2_behind_a_proxy(
    postgres: PrivatePostgres, tmp_path: Path, unsafe: str
) -> Iterator[tuple[LocalCluster, FaultyProxy, Probe]]:
    """A cluster whose node 2 reaches PostgreSQL through a proxy a test can cut, and a probe
    connected to node 2 on a segment of one of its containers."""
    database = postgres.url.rsplit("/", 1)[1]
    proxy = FaultyProxy(postgres.port)
    cluster = LocalCluster(tmp_path, postgres.url, controllers=1, unsafe=unsafe)
    cluster.node_env[2] = {"DATABASE_URL": f"postgres://postgres@127.0.0.1:{proxy.port}/{database}"}
    try:
        cluster.start()
        manager = StreamManager(cluster.base(0), token=cluster.token)
        manager.create_scope("probed")
        manager.create_stream("probed", "probe", initial_segments=32)
        manager.close()
        yield cluster, proxy, Probe(cluster, cluster.base(0), "probed", "node-2", 0)
    finally:
        cluster.close()
        proxy.close()
