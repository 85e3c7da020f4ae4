"""Kafka's own clients, configured for a node's or a cluster's Kafka listeners as a user
configures them."""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from tests.acceptance.standalone_node import Standalone


class KafkaTarget(Protocol):
    """A standalone node or a cluster: its Kafka listeners and the admin's token."""

    @property
    def kafka_bootstrap(self) -> str: ...

    @property
    def token(self) -> str: ...


def bootstrap(node: KafkaTarget) -> str:
    return node.kafka_bootstrap


def confluent(node: KafkaTarget, **extra: Any) -> dict[str, Any]:
    """confluent-kafka's (librdkafka's) settings: SASL/PLAIN as the admin, its token the
    password."""
    return {
        "bootstrap.servers": bootstrap(node), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN", "sasl.username": "admin", "sasl.password": node.token,
        **extra,
    }  # fmt: skip


def kafka_python(node: KafkaTarget, **extra: Any) -> dict[str, Any]:
    """kafka-python's and aiokafka's settings (they share the names)."""
    return {
        "bootstrap_servers": bootstrap(node), "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN", "sasl_plain_username": "admin",
        "sasl_plain_password": node.token, **extra,
    }  # fmt: skip


def kcat(node: KafkaTarget, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
    """Debian's kcat, as the admin; its standard output (a failure shows its error output)."""
    argv = [
        "kcat", "-b", bootstrap(node), "-X", "security.protocol=SASL_PLAINTEXT",
        "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=admin",
        "-X", f"sasl.password={node.token}", *args,
    ]  # fmt: skip
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"kcat {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done.stdout


def raw_exchange(node: Standalone, frame: bytes, timeout: float = 10) -> bytes:
    """Send ``frame`` (whole: size and all) on a new connection; what comes back before the
    node closes or goes quiet for a second."""
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=timeout) as sock:
        sock.sendall(frame)
        sock.settimeout(1.0)
        got = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                got += chunk
                if len(got) >= 4 and len(got) >= 4 + struct.unpack(">i", got[:4])[0]:
                    break
        except TimeoutError:
            pass
        return got


def request_frame(key: int, version: int, correlation: int, body: bytes, flexible: bool) -> bytes:
    """A request frame with a request header (v2 when ``flexible``: with its tag count)."""
    header = struct.pack(">hhih", key, version, correlation, 4) + b"test"
    if flexible:
        header += b"\0"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


class RawKafka:
    """One connection speaking Kafka's protocol request by request, as a client library would
    on the wire (kio's entities), signed in with SASL/PLAIN: for tests that need to send
    exactly the bytes a retry sends."""

    def __init__(self, node: Standalone) -> None:
        self.sock = socket.create_connection(("127.0.0.1", node.kafka_port), timeout=30)
        self.correlation = 0
        from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
        from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

        self.call(SaslHandshakeRequest(mechanism="PLAIN"))
        answer = self.call(SaslAuthenticateRequest(auth_bytes=f"\0admin\0{node.token}".encode()))
        assert answer.error_code == 0, answer

    def call(self, request: Any) -> Any:
        import io

        from kio.index import load_response_schema
        from kio.serial import entity_reader, entity_writer

        self.correlation += 1
        header_schema = request.__header_schema__
        out = io.BytesIO()
        entity_writer(header_schema)(out, header_schema(
            request_api_key=request.__api_key__, request_api_version=request.__version__,
            correlation_id=self.correlation, client_id="raw",
        ))  # fmt: skip
        entity_writer(type(request))(out, request)
        payload = out.getvalue()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", self._exactly(4))[0]
        frame = self._exactly(size)
        schema = load_response_schema(request.__api_key__, request.__version__)
        _, used = entity_reader(schema.__header_schema__)(frame, 0)
        return entity_reader(schema)(frame, used)[0]

    def _exactly(self, size: int) -> bytes:
        got = b""
        while len(got) < size:
            chunk = self.sock.recv(size - len(got))
            assert chunk, "the node closed the connection"
            got += chunk
        return got

    def close(self) -> None:
        self.sock.close()


# -- a node's fault under an idempotent producer ---------------------------------------------------


def leaders(target: KafkaTarget, topic: str) -> dict[int, int]:
    """Each partition's leader (a broker id) in ``Metadata``."""
    from confluent_kafka.admin import AdminClient

    found = AdminClient(confluent(target)).list_topics(topic, timeout=10).topics[topic]
    return {p.id: p.leader for p in found.partitions.values()}


def ride_through(cluster: Any, topic: str, strike: Callable[[int], None], **extra: Any) -> float:
    """An idempotent confluent-kafka producer writes ``topic`` (six partitions) over ``cluster``
    (a ``LocalCluster``) while ``strike(i)`` faults node ``i``, the one leading the most of its
    partitions: the seconds from the strike until each of that node's partitions took records
    again. Checked: they are led by the others then, no record failed, and a consumer group
    reads back every record acknowledged, each once. ``extra``: the producer's settings."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.acceptance.standalone_node import eventually

    admin = AdminClient(confluent(cluster))
    admin.create_topics([NewTopic(topic, num_partitions=6)])[topic].result(60)
    settings = {"enable.idempotence": True, "linger.ms": 5, "delivery.timeout.ms": 120_000}
    producer = Producer(confluent(cluster, **settings, **extra))
    acknowledged: set[str] = set()
    last_ack: dict[int, float] = {}  # partition -> when a record of it was last acknowledged
    failed: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acknowledged.add(msg.value().decode())
            last_ack[msg.partition()] = time.monotonic()
        else:
            failed.append(err)

    stop, sent = threading.Event(), [0]

    def produce() -> None:
        while not stop.is_set():
            producer.produce(topic, key=f"k{sent[0] % 40}", value=f"r{sent[0]}",
                             on_delivery=delivered)  # fmt: skip
            sent[0] += 1
            producer.poll(0)
            time.sleep(0.002)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        eventually(lambda: len(acknowledged) > 300, 60, "records acknowledged before the fault")
        brokers = admin.list_topics(timeout=10).brokers
        led_by = leaders(cluster, topic)
        # (the node leading the most partitions: where containers land varies from run to run)
        victim = max(brokers, key=lambda b: sum(leader == b for leader in led_by.values()))
        led = [p for p, leader in led_by.items() if leader == victim]
        assert led and -1 not in led_by.values(), led_by
        strike(cluster.kafka_ports.index(brokers[victim].port))
        struck = time.monotonic()
        # every partition the node led takes records again: its containers moved and recovered
        # (its session times out in 5 s), and the producer followed them
        eventually(lambda: all(last_ack.get(p, 0) > struck for p in led), 90,
                   "records of the node's partitions acknowledged again")  # fmt: skip
        resumed = time.monotonic() - struck
        # led by the others now, in every node's Metadata (each reads the owners every 2 s)
        eventually(lambda: all(leader not in (victim, -1) for p, leader in
                               leaders(cluster, topic).items() if p in led), 30,
                   "the node's partitions led by the others")  # fmt: skip
    finally:
        stop.set()
        thread.join(30)
    assert producer.flush(120) == 0
    assert not failed, failed[:3]
    consumer = Consumer(confluent(cluster, **{"group.id": f"audit-{topic}",
                                              "auto.offset.reset": "earliest"}))  # fmt: skip
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
    return resumed
