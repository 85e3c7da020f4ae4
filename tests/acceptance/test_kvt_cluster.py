"""Key-value tables in a cluster: a table's partitions are served by whichever nodes own their
containers. Under a writer's load, the node serving some partitions is SIGKILLed: its
containers move to the other nodes, the client follows them (asking the controller where each
partition is now), and every put that was acknowledged is there at the end. It also runs while
the killed node is started again and the containers are balanced back onto it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from millrace.client.errors import ConnectionLostError
from millrace.client.kvt import KeyValueTableManager
from millrace.client.manager import StreamManager
from millrace.kernel.kvt import kvt_segment_name
from millrace.kernel.naming import container_for
from tests.acceptance.cluster import LocalCluster
from tests.acceptance.postgres import PrivatePostgres
from tests.acceptance.standalone_node import eventually

FAILOVER_SECONDS = 120
PARTITIONS = 6


@pytest.fixture
def cluster(postgres: PrivatePostgres, tmp_path: Path) -> Any:
    yield from LocalCluster(tmp_path, postgres.url).running()


class Writer(threading.Thread):
    """Puts ``k<n>`` = ``v<n>`` for n = 0, 1, ... until stopped; remembers each acknowledged
    put. A put whose connection was lost after it was sent is put again (the client does not
    resend a change it may have made; a program that may repeat it does so)."""

    def __init__(self, cluster: LocalCluster, scope: str) -> None:
        super().__init__(daemon=True)
        self.manager = KeyValueTableManager(cluster.base(0), cluster.token)
        self.table = self.manager.open(scope, "t")
        self.acked: dict[bytes, bytes] = {}
        self.resent = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stopping.is_set():
                key, value = b"k%07d" % n, b"v%d" % n
                while True:
                    try:
                        self.table.put(key, value)
                        break
                    except ConnectionLostError:
                        self.resent += 1
                        time.sleep(0.1)
                self.acked[key] = value
                n += 1
        except BaseException as exc:
            self.error = exc

    def wait_acked(self, count: int, timeout: float = 120) -> None:
        eventually(lambda: len(self.acked) >= count or self.error, timeout, f"{count} puts")
        assert self.error is None, self.error

    def stop(self) -> None:
        self.stopping.set()
        self.join(120)
        assert self.error is None, self.error


def test_a_node_dies_under_load_the_partitions_move_and_no_acknowledged_put_is_lost(
    cluster: LocalCluster,
) -> None:
    with StreamManager(cluster.base(0), cluster.token) as streams:
        streams.create_scope("kv")
    with KeyValueTableManager(cluster.base(0), cluster.token) as manager:
        assert manager.create_kvt("kv", "t", partitions=PARTITIONS, primary_key_length=8)
    owners = cluster.owners()
    served = {
        owners[container_for(kvt_segment_name("kv", "t", n), cluster.containers)]
        for n in range(PARTITIONS)
    }
    victim = sorted(served)[0]  # a node serving at least one partition
    writer = Writer(cluster, "kv")
    writer.start()
    try:
        writer.wait_acked(300)
        cluster.processes[victim].kill()
        nodes = {f"node-{i}" for i in range(3)}
        eventually(lambda: cluster.spread(nodes - {victim}), FAILOVER_SECONDS, "failover")
        writer.wait_acked(len(writer.acked) + 300)  # it follows the moved partitions
        cluster.start_node(int(victim.rsplit("-", 1)[1]))
        eventually(lambda: cluster.spread(nodes), FAILOVER_SECONDS, "rebalance")
        writer.wait_acked(len(writer.acked) + 300)
    finally:
        writer.stop()
    acked = dict(writer.acked)
    with KeyValueTableManager(cluster.base(1), cluster.token) as manager:
        table = manager.open("kv", "t")
        found = {e.primary_key: e.value for e in table.entries()}
    missing = [k for k, v in acked.items() if found.get(k) != v]
    assert not missing, f"{len(missing)} acknowledged puts lost, e.g. {missing[:5]}"
    assert len(found) >= len(acked)
    writer.manager.close()
