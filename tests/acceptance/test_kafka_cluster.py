"""Kafka's clients against a three-node cluster, as Kafka's clients see one: every node's
listener in ``Metadata``, each partition led by the node that owns its container, each group
coordinated by the node that owns its key's container; and, when a node is SIGKILLed, its
partitions led by the nodes that took its containers, an idempotent producer going on with
nothing acknowledged lost and nothing stored twice, and a consumer group reading every record.

On a PostgreSQL server of the test's own (skipped with a notice where the machine has none).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from millrace.kernel.naming import container_for, qualified_segment_name, segment_id
from tests.acceptance.cluster import LocalCluster
from tests.acceptance.postgres import PrivatePostgres, module_postgres  # noqa: F401 - fixture
from tests.acceptance.standalone_node import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PARTITIONS = 6
#: From a node's SIGKILL to 300 more records acknowledged (a loaded 2-core machine: Millrace's own
#: clients are given 30 s in tests/acceptance/test_cluster.py).
FOLLOW_SECONDS = 30


@pytest.fixture(scope="module")
def cluster(module_postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory) -> Any:  # noqa: F811
    where = tmp_path_factory.mktemp("kafka-cluster")
    database = f"{module_postgres.url.rsplit('/', 1)[0]}/k{uuid.uuid4().hex[:8]}"
    yield from LocalCluster(where, database, controllers=1).running()


def _settings(cluster: LocalCluster, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in cluster.kafka_ports),
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
        "sasl.username": "admin", "sasl.password": cluster.token, **extra,
    }  # fmt: skip


def _leaders(cluster: LocalCluster, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    found = AdminClient(_settings(cluster)).list_topics(topic, timeout=10).topics[topic]
    return {p.id: p.leader for p in found.partitions.values()}


def test_metadata_names_every_node_and_each_partitions_owner(cluster: LocalCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(_settings(cluster))
    topic = "spread"
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(60)
    brokers = eventually(lambda: (lambda b: b if len(b) == 3 else None)(
        admin.list_topics(timeout=10).brokers), 30, "three brokers listed")  # fmt: skip
    assert sorted(b.port for b in brokers.values()) == sorted(cluster.kafka_ports)
    by_port = {b.id: b.port for b in brokers.values()}
    port_of = {f"node-{i}": port for i, port in enumerate(cluster.kafka_ports)}

    def agreed() -> dict[int, int] | None:
        """Each partition's leader in ``Metadata``, once it is the node that owns the
        partition's container (each node's view of who owns what follows the controller's
        within a few seconds)."""
        leaders = _leaders(cluster, topic)
        owners = cluster.owners()  # container -> node name
        for partition, leader in leaders.items():
            segment = qualified_segment_name("kafka", topic, segment_id(0, partition))
            owner = owners.get(container_for(segment, cluster.containers))
            if leader == -1 or by_port.get(leader) != port_of.get(owner or ""):
                return None
        return leaders

    leaders = eventually(agreed, 30, "every partition led by its container's owner")
    assert len(set(leaders.values())) > 1  # (the partitions are spread over the nodes)


def test_an_idempotent_producer_and_a_group_through_a_nodes_sigkill(cluster: LocalCluster) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "through-kill"
    admin = AdminClient(_settings(cluster))
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(60)
    producer = Producer(_settings(cluster, **{"enable.idempotence": True, "linger.ms": 5,
                                              "delivery.timeout.ms": 120_000}))  # fmt: skip
    acknowledged: set[str] = set()
    #: Partition -> when a record of it was last acknowledged.
    last_ack: dict[int, float] = {}
    failed: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acknowledged.add(msg.value().decode())
            last_ack[msg.partition()] = time.monotonic()
        else:
            failed.append(err)

    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        while not stop.is_set():
            value = f"r{sent[0]}"
            producer.produce(topic, key=f"k{sent[0] % 40}", value=value, on_delivery=delivered)
            sent[0] += 1
            producer.poll(0)
            time.sleep(0.002)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        eventually(lambda: len(acknowledged) > 300, 60, "records acknowledged before the kill")
        brokers = admin.list_topics(timeout=10).brokers
        victim = next(b.id for b in brokers.values() if b.port == cluster.kafka_ports[2])
        led = [p for p, leader in _leaders(cluster, topic).items() if leader == victim]
        assert led, "node-2 leads no partition: its kill would test nothing"
        killed = cluster.processes["node-2"]
        killed.kill()
        moved = time.monotonic()
        # every partition the node led takes records again: its containers moved and recovered
        # (its session times out in 5 s), and the producer followed them
        eventually(lambda: all(last_ack.get(p, 0) > moved for p in led), 90,
                   "records of the killed node's partitions acknowledged again")  # fmt: skip
        resumed = time.monotonic() - moved
        assert resumed < FOLLOW_SECONDS, f"{resumed:.1f} s to produce again"
        moved_away = _leaders(cluster, topic)
        assert all(moved_away[p] not in (victim, -1) for p in led)  # led by the others now
    finally:
        stop.set()
        thread.join(30)
    assert producer.flush(120) == 0
    assert not failed, failed[:3]

    consumer = Consumer(
        _settings(cluster, **{"group.id": "audit", "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while len(seen) < sent[0] and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            seen.append(message.value().decode())
    consumer.close()
    assert acknowledged <= set(seen), f"{len(acknowledged - set(seen))} acknowledged, not stored"
    assert len(seen) == len(set(seen)), "a record stored twice"
    cluster.start_node(2)
    eventually(cluster.spread, 90, "the node back and containers spread again")
