"""Kafka's own clients, unchanged, against a standalone node's Kafka listener.

confluent-kafka (librdkafka), kafka-python, aiokafka and Debian's kcat, as a user configures
them (SASL/PLAIN as a Millrace user, its API token the password): topics created, described
and deleted; records produced with keys and headers, consumed through groups, committed, and
resumed from after a restart of the segment store; records and events crossing between the
Kafka face and Millrace's own clients; compressed batches; and a protocol fuzz that leaves the
node serving with nothing stored changed.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
import socket
import struct
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.kernel.naming import KAFKA_RECORDS_MARK, qualified_segment_name, segment_id
from tests.acceptance import kafka_clients as kc
from tests.acceptance.standalone_node import (
    READY_LINE,
    Standalone,
    eventually,
    free_ports,
    running_standalone,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory, "kafka", {})


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _consume_confluent(node: Standalone, topic: str, group: str, want: int,
                       timeout: float = 60) -> list[Any]:  # fmt: skip
    from confluent_kafka import Consumer

    consumer = Consumer(kc.confluent(node, **{
        "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
    }))  # fmt: skip
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < want and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(message)
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


# -- each client --------------------------------------------------------------------------------


def test_kcat_lists_produces_and_consumes(node: Standalone) -> None:
    listed = kc.kcat(node, "-L")
    assert f"broker 0 at 127.0.0.1:{node.kafka_port}" in listed
    topic = _topic("kcat")
    lines = [f"line {i}" for i in range(20)]
    kc.kcat(
        node,
        "-P",
        "-t",
        topic,
        "-K",
        ":",
        stdin="\n".join(f"k{i}:{v}" for i, v in enumerate(lines)) + "\n",
    )
    out = kc.kcat(node, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o %k %s\n")
    assert out.splitlines() == [f"{i} k{i} {line}" for i, line in enumerate(lines)]
    assert f'topic "{topic}" with 1 partitions' in kc.kcat(node, "-L", "-t", topic)


def test_confluent_kafka_admin_produce_group_commit_resume(node: Standalone) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient(kc.confluent(node))
    topic = _topic("confluent")
    admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(30)
    described = admin.describe_configs([ConfigResource("topic", topic)])
    configs = next(iter(described.values())).result(30)
    assert configs["millrace.stream"].value == f"kafka/{topic}"
    again = admin.create_topics([NewTopic(topic, num_partitions=3)])[topic]
    with pytest.raises(Exception, match="exists"):
        again.result(30)

    producer = Producer(kc.confluent(node, **{"enable.idempotence": True, "acks": "all"}))
    delivered: list[Any] = []
    for i in range(300):
        producer.produce(topic, key=f"key-{i % 7}", value=f"value {i}",
                         headers=[("n", str(i).encode())],
                         on_delivery=lambda err, msg: delivered.append((err, msg)))  # fmt: skip
    assert producer.flush(30) == 0
    assert all(err is None for err, _ in delivered) and len(delivered) == 300
    # Offsets are dense per partition: each partition's records are 0, 1, 2, ...
    by_partition: dict[int, list[int]] = {}
    for _, msg in delivered:
        by_partition.setdefault(msg.partition(), []).append(msg.offset())
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))

    group = _topic("group")
    first = _consume_confluent(node, topic, group, 300)
    assert sorted(m.value().decode() for m in first) == sorted(f"value {i}" for i in range(300))
    for message in first:  # each record's key and headers come back with it
        i = int(message.value().decode().split()[1])
        assert message.key() == f"key-{i % 7}".encode()
        assert message.headers() == [("n", str(i).encode())]
        assert message.timestamp()[1] > 0
    for partition, offsets in by_partition.items():  # per partition in the order produced
        seen = [m.offset() for m in first if m.partition() == partition]
        assert seen == sorted(seen) == list(range(len(offsets)))

    # The segment store dies and comes back: offsets go on from where they were, and the
    # group resumes after what it committed.
    store = node.pid_of("segmentstore")
    assert store is not None
    import os

    os.kill(store, signal.SIGKILL)
    eventually(lambda: node.pid_of("segmentstore") not in (None, store), 60, "a new segment store")
    for i in range(300, 350):
        producer.produce(topic, key=f"key-{i % 7}", value=f"value {i}")
    deadline = time.monotonic() + 60
    while producer.flush(5) and time.monotonic() < deadline:
        pass
    assert producer.flush(0) == 0
    second = _consume_confluent(node, topic, group, 50)
    assert sorted(m.value().decode() for m in second) == sorted(
        f"value {i}" for i in range(300, 350)
    )
    for partition in by_partition:
        seen = [m.offset() for m in second if m.partition() == partition]
        assert seen == list(
            range(len(by_partition[partition]), len(by_partition[partition]) + len(seen))
        )

    # (partition 0's records' keys, times and headers)
    companion = qualified_segment_name("kafka", topic, segment_id(0, 0)) + KAFKA_RECORDS_MARK
    assert node.segment_exists(companion)
    admin.delete_topics([topic])[topic].result(60)
    eventually(lambda: topic not in admin.list_topics(timeout=10).topics, 30, "the topic gone")
    eventually(lambda: not node.segment_exists(companion), 30, "the companion segment gone")


def test_kafka_python_admin_produce_and_group(node: Standalone) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(**kc.kafka_python(node))
    topic = _topic("kafkapython")
    admin.create_topics([NewTopic(topic, 2, 1)])
    assert topic in admin.list_topics()
    producer = KafkaProducer(acks="all", **kc.kafka_python(node))
    futures = [producer.send(topic, key=b"k%d" % (i % 3), value=b"v%d" % i,
                             headers=[("h", b"x")]) for i in range(100)]  # fmt: skip
    producer.flush()
    assert all(f.get(10).offset >= 0 for f in futures)
    consumer = KafkaConsumer(topic, group_id=_topic("g"), auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000, **kc.kafka_python(node))  # fmt: skip
    got = [message.value for message in consumer]
    consumer.commit()
    consumer.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(100))
    admin.delete_topics([topic])
    eventually(lambda: topic not in admin.list_topics(), 30, "the topic gone")
    admin.close()
    producer.close()


def test_aiokafka_produce_and_group(node: Standalone) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _topic("aiokafka")

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(acks="all", enable_idempotence=True, **kc.kafka_python(node))
        await producer.start()
        try:
            for i in range(50):
                await producer.send_and_wait(topic, b"v%d" % i, key=b"same key")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, group_id=_topic("g"), auto_offset_reset="earliest",
                                    **kc.kafka_python(node))  # fmt: skip
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < 50 and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=1000)
                for messages in batch.values():
                    got += [m.value for m in messages]
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [b"v%d" % i for i in range(50)]  # one key: in order


# -- security ------------------------------------------------------------------------------------


def test_without_sasl_a_client_sees_no_topic_and_can_do_nothing(node: Standalone) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    topic = _topic("private")
    kc.kcat(node, "-P", "-t", topic, stdin="secret\n")
    anonymous = {"bootstrap.servers": kc.bootstrap(node)}
    listed = AdminClient(anonymous).list_topics(timeout=10)
    assert listed.topics == {}
    producer = Producer({**anonymous, "message.timeout.ms": 5000})
    errors: list[Any] = []
    producer.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    wrong = kc.confluent(node, **{"sasl.password": "not the token"})
    with pytest.raises(KafkaException):  # (librdkafka logs "SASL authentication error")
        AdminClient(wrong).list_topics(timeout=10)
    # ... and the record stored before is still the only one.
    out = kc.kcat(node, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o %s\n")
    assert out.splitlines() == ["0 secret"]


# -- one store, every face ------------------------------------------------------------------------


def test_millrace_events_are_kafka_records_and_kafka_records_are_events(node: Standalone) -> None:
    from confluent_kafka import Producer

    manager = node.manager()
    topic = _topic("interop")
    manager.create_scope("kafka")
    manager.create_stream("kafka", topic, initial_segments=1)
    writer = manager.create_writer("kafka", topic)
    for i in range(40):
        writer.write_event(f"from millrace {i}", routing_key="k")
    writer.flush()
    got = _consume_confluent(node, topic, _topic("g"), 40)
    assert [m.value().decode() for m in got] == [f"from millrace {i}" for i in range(40)]
    assert [m.offset() for m in got] == list(range(40))

    producer = Producer(kc.confluent(node))
    for i in range(40):
        producer.produce(topic, value=f"from kafka {i}")
    assert producer.flush(30) == 0
    reader = manager.create_reader("kafka", topic)
    events = []
    while len(events) < 80:
        event = reader.read_next(timeout=10)
        assert event is not None, f"only {len(events)} events"
        events.append(bytes(event.data).decode())
    assert events == [f"from millrace {i}" for i in range(40)] + [
        f"from kafka {i}" for i in range(40)
    ]
    reader.close()
    manager.close()


def test_kafka_and_millrace_writers_interleaved_on_one_partition(node: Standalone) -> None:
    """A Millrace writer appending between Kafka's produces: every record gets the next
    offset, and each Kafka record keeps its own key (an append that another writer got ahead
    of is placed again, and its keys with it)."""
    import threading

    from confluent_kafka import Producer

    manager = node.manager()
    topic = _topic("interleaved")
    manager.create_scope("kafka")
    manager.create_stream("kafka", topic, initial_segments=1)
    writer = manager.create_writer("kafka", topic)

    def millrace_writes() -> None:
        for i in range(300):
            writer.write_event(f"m{i}", routing_key="x")
            if i % 10 == 0:
                writer.flush()
        writer.flush()

    thread = threading.Thread(target=millrace_writes)
    thread.start()
    producer = Producer(kc.confluent(node, **{"linger.ms": 0}))
    for i in range(300):
        producer.produce(topic, key=f"key {i}", value=f"k{i}")
        if i % 10 == 0:
            producer.flush(10)
    assert producer.flush(30) == 0
    thread.join(60)
    got = _consume_confluent(node, topic, _topic("g"), 600)
    assert [m.offset() for m in got] == list(range(600))
    values = [m.value().decode() for m in got]
    assert sorted(values) == sorted([f"m{i}" for i in range(300)] + [f"k{i}" for i in range(300)])
    for message in got:
        value = message.value().decode()
        if value.startswith("k"):
            assert message.key() == f"key {value[1:]}".encode()
        else:
            assert message.key() is None  # (a Millrace event keeps no key)
    manager.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_stored_and_read_back(node: Standalone, codec: str) -> None:
    from confluent_kafka import Producer

    topic = _topic(codec)
    producer = Producer(kc.confluent(node, **{"compression.type": codec, "linger.ms": 50}))
    for i in range(500):
        producer.produce(topic, value=f"{codec} record {i} " * 4)
    assert producer.flush(30) == 0
    got = _consume_confluent(node, topic, _topic("g"), 500)
    assert [m.value().decode() for m in got] == [f"{codec} record {i} " * 4 for i in range(500)]


# -- bad input ------------------------------------------------------------------------------------


def _end_offset(node: Standalone, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kc.confluent(node, **{"group.id": "offsets"}))
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def _bad_batch(topic: str) -> Any:
    """A Produce v9 of one record batch whose CRC does not match."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    builder.append(0, timestamp=None, key=None, value=b"corrupt", headers=[])
    batch = bytearray(builder.build())
    batch[-1] ^= 0xFF
    return ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
        topic_data=(TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=0, records=bytes(batch)),)),),
    )  # fmt: skip


def test_a_protocol_fuzz_leaves_the_node_serving_and_the_data_unchanged(node: Standalone) -> None:
    topic = _topic("fuzz")
    kc.kcat(node, "-P", "-t", topic, stdin="\n".join(f"r{i}" for i in range(10)) + "\n")
    before = _end_offset(node, topic)
    assert before == 10

    # An unknown API key is answered with UNSUPPORTED_VERSION (35), on its correlation id.
    reply = kc.raw_exchange(node, kc.request_frame(9999, 0, 5, b"", flexible=False))
    assert struct.unpack(">iih", reply[:10]) == (6, 5, 35)
    # ApiVersions in a version not offered: answered in v0 with the versions offered.
    reply = kc.raw_exchange(node, kc.request_frame(18, 99, 6, b"", flexible=False))
    size, correlation, error = struct.unpack(">iih", reply[:10])
    assert (correlation, error) == (6, 35) and size > 6
    # A Metadata request cut short: CORRUPT_MESSAGE... in a Metadata reply the client can read.
    reply = kc.raw_exchange(node, kc.request_frame(3, 12, 7, b"\x05\x01", flexible=True))
    assert struct.unpack(">ii", reply[:8])[1] == 7
    # A record batch with a bad CRC, from a client signed in: CORRUPT_MESSAGE (2) for its
    # partition, nothing stored.
    raw = kc.RawKafka(node)
    try:
        produced = raw.call(_bad_batch(topic))
    finally:
        raw.close()
    assert produced.responses[0].partition_responses[0].error_code == 2
    # Truncated frames, a size past the end, random bytes, a huge size: none stops the node.
    huge = struct.pack(">i", 200 * 1024 * 1024) + b"\0" * 64
    noise = zlib.compress(b"noise") * 3
    for junk in (b"\x00\x00", struct.pack(">i", 50) + b"abc", struct.pack(">i", -7), noise, huge):
        kc.raw_exchange(node, junk, timeout=5)
    with socket.create_connection(("127.0.0.1", node.kafka_port)) as sock:
        sock.sendall(struct.pack(">i", 100))  # a frame that never comes: the node waits, alone
        assert f"broker 0 at 127.0.0.1:{node.kafka_port}" in kc.kcat(node, "-L")
    assert _end_offset(node, topic) == before
    out = kc.kcat(node, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%s\n")
    assert out.splitlines() == [f"r{i}" for i in range(10)]


def test_the_banner_names_the_kafka_bootstrap(node: Standalone) -> None:
    assert f"bootstrap.servers=127.0.0.1:{node.kafka_port}" in node.output()


def test_a_taken_kafka_port_stops_the_start(tmp_path: Path) -> None:
    from tests.acceptance.standalone_node import free_ports

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        http, wire = free_ports(2)
        node = Standalone(tmp_path / "data", http, wire, env={"MILLRACE_KAFKA_PORT": str(port)})
        try:
            assert node.process.wait(120) != 0
            assert f"Kafka port 127.0.0.1:{port} is not free" in node.output()
            assert "MILLRACE_KAFKA_PORT" in node.output()
        finally:
            node.kill()


def test_a_stream_bound_to_its_schemas_holds_kafka_produces_to_them(node: Standalone) -> None:
    """The stream ``<scope>.st`` in ``header`` mode: a record Confluent's Avro serializer made
    is stored; a record without a schema header is refused (INVALID_RECORD) and not stored."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from tests.acceptance.standalone_node import request

    scope = f"e{uuid.uuid4().hex[:10]}"
    manager = node.manager()
    manager.create_scope(scope)
    body = {
        "streamName": "st",
        "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1},
        "schema": {"enforcement": "header"},
    }
    status, answer = request(node.base, "POST", f"/v1/scopes/{scope}/streams", node.token, body)
    assert status == 201, answer
    password = (node.data_dir / "admin-password").read_text().strip()
    registry = SchemaRegistryClient(
        {"url": f"{node.base}/registry", "basic.auth.user.info": f"admin:{password}"}
    )
    schema = '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}'
    topic = f"{scope}.st"
    typed = AvroSerializer(registry, schema)(
        {"id": 7}, SerializationContext(topic, MessageField.VALUE)
    )
    producer = Producer(kc.confluent(node, **{"message.send.max.retries": 0}))
    outcomes: list[Any] = []
    for value in (typed, b"plain bytes, no schema header"):
        producer.produce(topic, value=value, on_delivery=lambda err, msg: outcomes.append(err))
        assert producer.flush(30) == 0
    assert outcomes[0] is None
    assert outcomes[1] is not None and outcomes[1].code() == KafkaError.INVALID_RECORD
    got = _consume_confluent(node, topic, _topic("g"), 1, timeout=20)
    assert [m.value() for m in got] == [typed]
    assert _end_offset(node, topic) == 1
    manager.close()


CONSUMER_PROGRAM = """
import signal, sys
from confluent_kafka import Consumer
settings = dict(a.split("=", 1) for a in sys.argv[2:])
consumer = Consumer({**settings, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
consumer.subscribe([sys.argv[1]])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
with open(settings["client.id"] + ".log", "a", buffering=1) as out:
    while not stop:
        message = consumer.poll(0.2)
        if message is None or message.error() is not None:
            continue
        out.write(f"{message.partition()} {message.offset()} {message.value().decode()}\\n")
        consumer.commit(message=message, asynchronous=False)
consumer.close()  # leaves the group: the others take its partitions at once
"""


def test_a_group_of_three_with_one_leaving_and_one_killed_reads_every_record(
    node: Standalone, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = _topic("trio")
    admin = AdminClient(kc.confluent(node))
    admin.create_topics([NewTopic(topic, num_partitions=6)])[topic].result(60)
    producer = Producer(kc.confluent(node))

    def produce(start: int, count: int) -> None:
        for i in range(start, start + count):
            producer.produce(topic, key=f"k{i % 31}", value=f"v{i}")
        assert producer.flush(30) == 0

    produce(0, 600)
    program = tmp_path / "consumer.py"
    program.write_text(CONSUMER_PROGRAM)
    settings = [f"{k}={v}" for k, v in kc.confluent(node).items()]
    consumers = {
        name: subprocess.Popen(
            [sys.executable, str(program), topic, *settings, f"client.id={name}", "group.id=trio"],
            cwd=tmp_path,
        )
        for name in ("a", "b", "c")
    }

    def consumed() -> list[tuple[int, int, str]]:
        rows = []
        for name in consumers:
            log = tmp_path / f"{name}.log"
            if log.exists():
                for line in log.read_text().splitlines():
                    partition, offset, value = line.split(" ", 2)
                    rows.append((int(partition), int(offset), value))
        return rows

    try:
        eventually(lambda: len({r[2] for r in consumed()}) >= 200, 90, "200 records consumed")
        consumers["a"].terminate()  # a leaves the group
        assert consumers["a"].wait(30) == 0
        os.kill(consumers["b"].pid, signal.SIGKILL)  # b dies: its session times out
        consumers["b"].wait(10)
        produce(600, 300)
        eventually(lambda: {r[2] for r in consumed()} >= {f"v{i}" for i in range(900)}, 120,
                   "every record consumed by the group")  # fmt: skip
    finally:
        for process in consumers.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)
    # no record skipped: per partition, every offset from 0 to the end was read
    by_partition: dict[int, set[int]] = {}
    for partition, offset, _ in consumed():
        by_partition.setdefault(partition, set()).add(offset)
    for partition, offsets in by_partition.items():
        assert offsets == set(range(max(offsets) + 1)), f"partition {partition} skipped some"
    assert sum(len(o) for o in by_partition.values()) == 900


def _idempotent_produce(topic: str, producer_id: int) -> Any:
    """A Produce v9 of one batch of 3 records from producer ``producer_id`` (epoch 0,
    sequence 0): what an idempotent producer sends, and sends again when no reply came."""
    import datetime

    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    builder = DefaultRecordBatchBuilder(2, 0, False, producer_id, 0, 0, 1 << 20)
    for i in range(3):
        builder.append(i, timestamp=None, key=None, value=b"once %d" % i, headers=[])
    builder.set_producer_state(producer_id, 0, 0)
    return ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
        topic_data=(TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=0, records=bytes(builder.build())),)),),
    )  # fmt: skip


def _send_twice(node: Standalone) -> int:
    """An idempotent producer's batch, then the same batch again (its retry after a reply that
    never came): the records stored."""
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    topic = _topic("retried")
    kc.kcat(node, "-P", "-t", topic, stdin="first\n")
    raw = kc.RawKafka(node)
    try:
        given = raw.call(InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1,
        ))  # fmt: skip
        assert given.error_code == 0 and given.producer_id >= 0
        for _ in range(2):
            answer = raw.call(_idempotent_produce(topic, given.producer_id))
            assert answer.responses[0].partition_responses[0].error_code == 0
    finally:
        raw.close()
    return _end_offset(node, topic) - 1


def test_an_idempotent_producers_retry_is_stored_once(node: Standalone) -> None:
    assert _send_twice(node) == 3


@pytest.fixture(scope="module")
def node_without_dedup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """TEST-ONLY: a node whose engine keeps no writer's event numbers (``no-dedup``)."""
    env = {"MILLRACE_TEST_UNSAFE": "no-dedup"}
    yield from running_standalone(tmp_path_factory, "kafka-no-dedup", env)


def test_without_deduplication_the_retry_is_stored_twice(node_without_dedup: Standalone) -> None:
    """The guard switched off: the same retry stores the batch again."""
    assert _send_twice(node_without_dedup) == 6


def test_kafka_records_reach_a_reader_group_and_a_websocket_tail(node: Standalone) -> None:
    """Records a Kafka producer wrote, with keys, read by Millrace's reader group and followed
    over a WebSocket as the README's tail follows a stream: the values, in order per partition."""
    import json

    import websockets.sync.client as ws_client
    from confluent_kafka import Producer

    topic = _topic("faces")
    producer = Producer(kc.confluent(node))
    for i in range(50):
        producer.produce(topic, key=f"k{i % 5}", value=f"face {i}")
    assert producer.flush(30) == 0

    manager = node.manager()
    group = manager.create_reader_group("kafka", _topic("rg"), [f"kafka/{topic}"])
    reader = group.create_reader("r1")
    seen = []
    while len(seen) < 50:
        event = reader.read_next(timeout=10)
        assert event is not None, f"only {len(seen)} events"
        seen.append(bytes(event.data).decode())
    reader.close()
    assert seen == [f"face {i}" for i in range(50)]  # (one partition: in order)

    url = node.base.replace("http", "ws", 1)
    tail = f"{url}/ws/streams/kafka/{topic}?from=head&encoding=utf-8&token={node.token}"
    followed: list[str] = []
    with ws_client.connect(tail, open_timeout=30) as socket_:
        deadline = time.monotonic() + 30
        while len(followed) < 50 and time.monotonic() < deadline:
            message = json.loads(socket_.recv(timeout=10))
            followed += [event["text"] for event in message.get("events", [])]
    assert followed == [f"face {i}" for i in range(50)]
    manager.close()


# -- offsets after tier-2 offload ---------------------------------------------------------------

#: More than the container's cache (16 MiB): after a restart the first records are in tier-2 only.
OFFLOADED = 20_000
TIER2_ENV = {"MILLRACE_TIER2_FLUSH_DELAY_MS": "200", "MILLRACE_CACHE_BYTES": str(16 * 1024**2)}


def test_offsets_hold_after_tier2_offload_and_a_restart(tmp_path: Path) -> None:
    """20 MB produced to one partition, flushed to tier-2, the node stopped and started again
    with a cold cache: every offset still names its record (read back in full, and from an
    offset in the middle), keys included, and the end offset is the record count."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    http, wire = free_ports(2)
    node = Standalone(tmp_path / "data", http, wire, env=TIER2_ENV)
    topic = _topic("offloaded")
    try:
        node.wait_for(READY_LINE)
        producer = Producer(kc.confluent(node, **{"acks": "all", "linger.ms": 20}))
        pad = "x" * 1000
        for i in range(OFFLOADED):
            producer.produce(topic, key=f"k{i}", value=f"{i:06d} {pad}")
            if i % 1000 == 999:
                producer.poll(0)
        assert producer.flush(120) == 0
        eventually(lambda: node.store_metric("millrace_container_tier2_lag_bytes") == 0, 90,
                   "every record in tier-2")  # fmt: skip
        assert node.stop() == 0
    finally:
        node.kill()
    node = Standalone(tmp_path / "data", *free_ports(2), env=TIER2_ENV)
    try:
        node.wait_for(READY_LINE)
        consumer = Consumer(kc.confluent(node, **{"group.id": _topic("g"),
                                                  "enable.auto.commit": False}))  # fmt: skip
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (
            0, OFFLOADED)  # fmt: skip
        consumer.assign([TopicPartition(topic, 0, 12_345)])
        first = eventually(lambda: (lambda m: m if m and not m.error() else None)(
            consumer.poll(1)), 60, "a record from offset 12,345")  # fmt: skip
        assert (first.offset(), first.key(), first.value()[:6]) == (12_345, b"k12345", b"012345")
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        deadline = time.monotonic() + 120
        while seen < OFFLOADED and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None or message.error():
                continue
            assert message.offset() == seen and message.value()[:6] == b"%06d" % seen
            seen += 1
        consumer.close()
        assert seen == OFFLOADED
    finally:
        node.kill()
