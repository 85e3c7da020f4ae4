"""Kafka's clients against a three-node cluster, as Kafka's clients see one: every node's
listener in ``Metadata``, each partition led by the node that owns its container, each group
coordinated by the node that owns its key's container; and, when a node is SIGKILLed or paused
(SIGSTOP) past its session, its partitions led by the nodes that took its containers, an
idempotent producer going on with nothing acknowledged lost and nothing stored twice, and a
consumer group reading every record.

kafka-python, aiokafka and kcat, unchanged, each create a topic, produce with keys and headers
and read in a group that commits, then resume after a node's SIGKILL and restart.

On a PostgreSQL server of the test's own (skipped with a notice where the machine has none).
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from typing import Any

import pytest

from millrace.kernel.naming import container_for, qualified_segment_name, segment_id
from tests.acceptance import kafka_clients as kc
from tests.acceptance.cluster import LocalCluster
from tests.acceptance.postgres import PrivatePostgres, module_postgres  # noqa: F401 - fixture
from tests.acceptance.standalone_node import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PARTITIONS = 6
#: From a node's SIGKILL or pause to records of each of its partitions acknowledged again (a
#: loaded 2-core machine: Millrace's own clients are given 30 s in tests/acceptance/test_cluster.py;
#: the times seen are printed).
FOLLOW_SECONDS = 30


@pytest.fixture(scope="module")
def cluster(module_postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory) -> Any:  # noqa: F811
    where = tmp_path_factory.mktemp("kafka-cluster")
    database = f"{module_postgres.url.rsplit('/', 1)[0]}/k{uuid.uuid4().hex[:8]}"
    yield from LocalCluster(where, database, controllers=1).running()


def test_metadata_names_every_node_and_each_partitions_owner(cluster: LocalCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(kc.confluent(cluster))
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
        leaders = kc.leaders(cluster, topic)
        owners = cluster.owners()  # container -> node name
        for partition, leader in leaders.items():
            segment = qualified_segment_name("kafka", topic, segment_id(0, partition))
            owner = owners.get(container_for(segment, cluster.containers))
            if leader == -1 or by_port.get(leader) != port_of.get(owner or ""):
                return None
        return leaders

    leaders = eventually(agreed, 30, "every partition led by its container's owner")
    assert len(set(leaders.values())) > 1  # (the partitions are spread over the nodes)


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_an_idempotent_producer_and_a_group_through_a_nodes_fault(
    cluster: LocalCluster, fault: str
) -> None:
    """The node leading the most partitions is SIGKILLed, or SIGSTOPped (paused past its
    session, then woken by ``restore``), under an idempotent producer: its partitions are led
    by the others and take records again within ``FOLLOW_SECONDS``; nothing acknowledged is
    lost and nothing stored twice, as a consumer group reads back."""

    def strike(i: int) -> None:
        process = cluster.processes[f"node-{i}"]
        if fault == "kill":
            process.kill()
        else:
            process.signal(signal.SIGSTOP)

    # (a paused node keeps its connections open and answers nothing: a client gives up on it
    # after socket.timeout.ms, 60 s by default, as against a paused Kafka broker; the guides
    # say to set it to 10 s where a pause is to be ridden through as fast as a kill)
    timeouts = {"socket.timeout.ms": 10_000} if fault == "pause" else {}
    resumed = kc.ride_through(cluster, f"through-{fault}", strike, **timeouts)
    print(f"{fault}: the node's partitions took records again after {resumed:.1f} s")
    assert resumed < FOLLOW_SECONDS, f"{resumed:.1f} s to produce again"
    cluster.restore()  # (the node started again, or woken, every container served)


# -- kafka-python, aiokafka and kcat, unchanged, through a node's restart -------------------------

RECORDS = 60


def _kafka_python(cluster: LocalCluster, topic: str, group: str, first: int) -> list[Any]:
    """Create the topic (the first time), produce ``RECORDS`` records from ``first`` with keys
    and headers, and read in the group what it has not committed; commits."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    if first == 0:
        admin = KafkaAdminClient(**kc.kafka_python(cluster))
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        assert topic in admin.list_topics()
        admin.close()
    producer = KafkaProducer(acks="all", **kc.kafka_python(cluster))
    numbers = range(first, first + RECORDS)
    sent = [producer.send(topic, key=b"k%d" % (i % 5), value=b"v%d" % i,
                          headers=[("n", b"%d" % i)]) for i in numbers]  # fmt: skip
    producer.flush(60)
    assert all(f.get(60).offset >= 0 for f in sent)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=15_000,
                             **kc.kafka_python(cluster))  # fmt: skip
    got = [(m.key, m.value, list(m.headers)) for m in consumer]
    consumer.commit()
    consumer.close()
    return got


def _aiokafka(cluster: LocalCluster, topic: str, group: str, first: int) -> list[Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run() -> list[Any]:
        if first == 0:
            admin = AIOKafkaAdminClient(**kc.kafka_python(cluster))
            await admin.start()
            try:
                await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
            finally:
                await admin.close()
        producer = AIOKafkaProducer(acks="all", enable_idempotence=True,
                                    **kc.kafka_python(cluster))  # fmt: skip
        await producer.start()
        try:
            for i in range(first, first + RECORDS):
                await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % (i % 5),
                                             headers=[("n", b"%d" % i)])  # fmt: skip
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
            **kc.kafka_python(cluster),
        )  # fmt: skip
        await consumer.start()
        got: list[Any] = []
        try:
            deadline, quiet = time.monotonic() + 60, 0
            while time.monotonic() < deadline and quiet < 5:
                batch = await consumer.getmany(timeout_ms=1000)
                found = [m for messages in batch.values() for m in messages]
                got += [(m.key, m.value, list(m.headers)) for m in found]
                quiet = 0 if found or not got else quiet + 1
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


def _kcat(cluster: LocalCluster, topic: str, group: str, first: int) -> list[Any]:
    """kcat has no admin: the topic is created by its first produce (auto-creation) and
    described by ``-L``; its balanced consumer (``-G``) commits as it closes."""
    lines = "".join(f"k{i % 5}:v{i}\n" for i in range(first, first + RECORDS))
    kc.kcat(cluster, "-P", "-t", topic, "-K", ":", "-H", "n=x", stdin=lines)
    assert f'topic "{topic}" with 1 partitions' in kc.kcat(cluster, "-L", "-t", topic)
    out = kc.kcat(cluster, "-G", group, "-X", "auto.offset.reset=earliest", "-e",
                  "-f", "%k %s %h\n", topic, timeout=120)  # fmt: skip
    return [tuple(line.split(" ")) for line in out.splitlines() if line]


def _expected(client: str, first: int) -> list[Any]:
    if client == "kcat":
        return [(f"k{i % 5}", f"v{i}", "n=x") for i in range(first, first + RECORDS)]
    return [
        (b"k%d" % (i % 5), b"v%d" % i, [("n", b"%d" % i)]) for i in range(first, first + RECORDS)
    ]


CLIENTS = {"kafka-python": _kafka_python, "aiokafka": _aiokafka, "kcat": _kcat}


def test_each_client_unchanged_on_the_cluster_and_through_a_nodes_restart(
    cluster: LocalCluster,
) -> None:
    """kafka-python, aiokafka and kcat each create (or auto-create) a topic, produce with keys
    and headers and read it in a group that commits; a node is SIGKILLed and started again;
    each produces more and its group reads exactly the records after what it committed."""
    cluster.restore()
    runs = {name: (f"{name}-topic", f"{name}-group") for name in CLIENTS}
    for name, client in CLIENTS.items():
        topic, group = runs[name]
        got = client(cluster, topic, group, 0)
        assert sorted(got) == sorted(_expected(name, 0)), name

    cluster.processes["node-1"].kill()
    eventually(lambda: cluster.spread({"node-0", "node-2"}), 60, "node-1's containers moved")
    cluster.restore()  # (node-1 started again, every container served)

    for name, client in CLIENTS.items():
        topic, group = runs[name]
        got = client(cluster, topic, group, RECORDS)
        assert sorted(got) == sorted(_expected(name, RECORDS)), name  # (nothing read twice)
