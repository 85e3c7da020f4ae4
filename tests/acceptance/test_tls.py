"""A standalone node with TLS on every port, used as its clients use it: the Python client, the
command line, a WebSocket tail, the metrics port; the refusals, each saying which; a
certificate replaced on disk while writers run, with nothing lost.

Certificates are made by the tests (``trustme``): a CA, and the node's certificate for
127.0.0.1 and localhost. (The console over TLS in the browser: ``tests/console``; the token
secret's rotation under load: ``test_credentials.py``.)
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from millrace.client.manager import StreamManager
from millrace.client.transport.segment_store import SegmentStoreClient
from millrace.kernel.tls import TlsRefused, client_context
from tests.acceptance.certs import Certs, write_atomically
from tests.acceptance.standalone_node import (
    READY_LINE,
    Standalone,
    eventually,
    free_ports,
    request,
    running_standalone,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Standalone]:
    cert, key = certs.issue("node")
    yield from running_standalone(tmp_path_factory, "tls", certs.env(cert, key))


def cli(node: Standalone, *args: str, ca: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_")}
    env["MILLRACE_DATA_DIR"] = str(node.data_dir)
    tls = ["--ca", str(node.tls_ca)] if ca else []
    return subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", *args, "--url", node.base, *tls],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def new_scope(manager: StreamManager, segments: int = 2) -> str:
    scope = f"tls{uuid.uuid4().hex[:8]}"
    manager.create_scope(scope)
    manager.create_stream(scope, "st", initial_segments=segments)
    return scope


def read_all(manager: StreamManager, scope: str, count: int) -> list[bytes]:
    reader = manager.create_reader(scope, "st")
    events: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(events) < count and time.monotonic() < deadline:
        event = reader.read_next(timeout=1.0)
        if event is not None:
            events.append(event.data)
    reader.close()
    return events


def test_every_face_speaks_tls(node: Standalone) -> None:
    assert "TLS on every port" in node.output()
    # (advertised as localhost: the certificate names it, and Pravega's Rust client verifies
    # names, never IP addresses)
    assert f"wire protocol tls://localhost:{node.wire_port}" in node.output()
    with node.manager() as manager:
        scope = new_scope(manager)
        writer = manager.create_writer(scope, "st")
        for i in range(300):
            writer.write_event(f"e{i}", routing_key=f"k{i % 7}")
        writer.flush()
        writer.close()
        assert sorted(read_all(manager, scope, 300)) == sorted(f"e{i}".encode() for i in range(300))

    # the node says it needs TLS where clients look it up (Pravega's getURI)
    path = f"/v1/scopes/{scope}/streams/st/segments/0/uri"
    status, uri = request(node.base, "GET", path, node.token, ca=node.tls_ca)
    assert status == 200 and uri["tls"] is True

    # the command line: status, write and read (a WebSocket tail over wss://)
    assert cli(node, "status").returncode == 0
    wrote = cli(node, "stream", "append", f"{scope}/st", "from-cli-1", "from-cli-2")
    assert wrote.returncode == 0, wrote.stderr
    read = cli(node, "stream", "read", f"{scope}/st", "--limit", "302")
    assert read.returncode == 0, read.stderr
    assert {"from-cli-1", "from-cli-2", "e0", "e299"} <= set(read.stdout.split())

    # a WebSocket tail as the README's program follows it
    assert len(asyncio.run(tail(node, scope, 302))) == 302

    # the metrics port, with a delegation token for everything
    minted = subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", "mint-token", "*", "--data-dir",
         str(node.data_dir)], capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    metrics = httpx.get(
        f"https://127.0.0.1:{node.metrics_port}/metrics",
        headers={"Authorization": f"Bearer {minted}"}, verify=client_context(node.tls_ca),
    )  # fmt: skip
    assert metrics.status_code == 200 and "millrace_stream_events_total" in metrics.text
    (end,) = [float(line.split()[-1]) for line in metrics.text.splitlines()
              if line.startswith("millrace_tls_certificate_end_timestamp_seconds ")]  # fmt: skip
    assert end > time.time() + 14 * 86400  # the test's certificate is far from its end


async def tail(node: Standalone, scope: str, count: int) -> list[str]:
    uri = node.base.replace("https://", "wss://") + f"/ws/streams/{scope}/st?from=head"
    events: list[str] = []
    async with websockets.connect(
        uri + "&encoding=utf-8", additional_headers={"Authorization": f"Token {node.token}"},
        ssl=client_context(node.tls_ca),
    ) as ws:  # fmt: skip
        while len(events) < count:
            message = json.loads(await asyncio.wait_for(ws.recv(), 30))
            assert message["type"] != "error", message
            events += [e["text"] for e in message.get("events", ())]
    return events


def test_each_refusal_says_which(node: Standalone, tmp_path: Path) -> None:
    # a plaintext client on the TLS HTTP port
    with pytest.raises(TlsRefused, match="serves TLS and this client connects in plaintext"):
        StreamManager(node.base.replace("https://", "http://"), token=node.token).create_scope("x")
    # a plaintext client on the TLS wire port
    with pytest.raises(TlsRefused, match=r"segment store .* serves TLS"):
        asyncio.run(SegmentStoreClient.connect("127.0.0.1", node.wire_port))
    # an unknown CA: the Python client, the command line, a WebSocket
    with pytest.raises(TlsRefused, match="signed by an unknown CA"):
        StreamManager(node.base, token=node.token).create_scope("x")
    refused = cli(node, "scope", "list", ca=False)
    assert refused.returncode != 0 and "signed by an unknown CA" in refused.stderr
    tailing = cli(node, "stream", "read", "a/b", ca=False)
    assert tailing.returncode != 0 and "signed by an unknown CA" in tailing.stderr
    status = cli(node, "status", ca=False)  # as every other command says it, not an SSL error
    assert status.returncode != 0 and "signed by an unknown CA" in status.stderr
    assert "give the CA file" in status.stderr
    # a TLS client on a plaintext port (the node's own port answers TLS; this one does not)
    with pytest.raises(TlsRefused, match="does not speak TLS"), socket_server() as port:
        StreamManager(f"https://127.0.0.1:{port}", token="t").create_scope("x")


def test_a_development_certificate_serves_a_node_as_the_guide_says(
    tmp_path: Path,
) -> None:
    """The security guide's first step: ``millrace tls dev-cert`` makes a CA and a node
    certificate; a standalone node serves TLS with the variables it prints, and ``millrace
    status`` and the Python client reach it by ``localhost`` and by ``127.0.0.1``."""
    made = subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", "tls", "dev-cert", "--dir",
         str(tmp_path / "tls")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    exported = dict(
        item.split("=", 1)
        for line in made.stdout.splitlines() if line.strip().startswith("export ")
        for item in line.split()[1:]
    )  # fmt: skip
    assert set(exported) == {"MILLRACE_TLS_ENABLED", "MILLRACE_TLS_CERT_FILE",
                             "MILLRACE_TLS_KEY_FILE", "MILLRACE_TLS_CA_FILE"}  # fmt: skip
    http, wire = free_ports(2)
    node = Standalone(tmp_path / "data", http, wire, env=exported)
    try:
        node.wait_for(READY_LINE)
        for host in ("localhost", "127.0.0.1"):
            status = subprocess.run(
                [sys.executable, "-m", "millrace.ops.cli", "status", "--url",
                 f"https://{host}:{http}", "--ca", exported["MILLRACE_TLS_CA_FILE"]],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert status.returncode == 0, status.stdout + status.stderr
        with StreamManager(
            f"https://localhost:{http}", token=node.token, tls_ca=exported["MILLRACE_TLS_CA_FILE"]
        ) as manager:
            manager.create_scope("dev")
    finally:
        node.kill()


class socket_server:
    """A plaintext HTTP server on loopback that answers 400 to anything (as uvicorn does)."""

    def __enter__(self) -> int:
        import http.server

        self.server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return int(self.server.server_port)

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_certificate_replaced_on_disk_while_writers_run_loses_nothing(
    node: Standalone, certs: Certs
) -> None:
    """The node's certificate and key are replaced (as an orchestrator rotates a mounted
    secret) while two writers append: new connections on every port get the new certificate
    within the reload period, open ones go on, and every acknowledged event is read back once,
    in order per key. Then a certificate for another host and an expired one are each refused
    saying so, and the host-name check switched off lets the wrong host in."""
    cert_file, key_file = (
        Path(node.environ["MILLRACE_TLS_CERT_FILE"]),
        Path(node.environ["MILLRACE_TLS_KEY_FILE"]),
    )
    http_port = int(node.base.rsplit(":", 1)[1])
    with node.manager() as manager:
        scope = new_scope(manager, segments=3)
        acked: dict[str, list[int]] = collections.defaultdict(list)
        stop = threading.Event()
        errors: list[BaseException] = []

        def write(name: str) -> None:
            try:
                with node.manager() as own:
                    writer = own.create_writer(scope, "st")
                    number = 0
                    while not stop.is_set():
                        batch = [number + i for i in range(20)]
                        for n in batch:
                            writer.write_event(f"{name}:{n}", routing_key=f"{name}-{n % 5}")
                        writer.flush()
                        acked[name] += batch
                        number += len(batch)
                    writer.close()
            except BaseException as exc:
                errors.append(exc)

        writers = [threading.Thread(target=write, args=(f"w{i}",)) for i in range(2)]
        for thread in writers:
            thread.start()
        time.sleep(1.5)
        new_cert, new_key = certs.issue("node-rotated")
        write_atomically(cert_file, new_cert.read_bytes())
        write_atomically(key_file, new_key.read_bytes())
        for port in (node.wire_port, http_port, node.metrics_port):
            eventually(lambda p=port: _served(p, new_cert), 15, f"the new certificate on {port}")
        with node.manager() as fresh:  # a client that connects after the change
            late = fresh.create_writer(scope, "st")
            late.write_event("after", routing_key="late")
            late.flush()
            late.close()
        time.sleep(1.0)
        stop.set()
        for thread in writers:
            thread.join(60)
        assert not errors, errors
        written = sum(len(v) for v in acked.values()) + 1
        events = [e.decode() for e in read_all(manager, scope, written)]
    assert len(events) == written and len(set(events)) == written
    for name, numbers in acked.items():
        for key in range(5):
            seen = [int(e.split(":")[1]) for e in events
                    if e.startswith(f"{name}:") and int(e.split(":")[1]) % 5 == key]  # fmt: skip
            assert seen == sorted(seen) == [n for n in numbers if n % 5 == key]

    # another host's certificate, then an expired one, each refused saying so
    for name, identities, expired, says in (
        ("other-host", ("node-7.example",), False, "for another host name"),
        ("expired", (), True, "has expired"),
    ):
        cert, key = certs.issue(name, *identities, expired=expired)
        write_atomically(cert_file, cert.read_bytes())
        write_atomically(key_file, key.read_bytes())
        eventually(lambda c=cert: _served(http_port, c), 15, f"{name} served")
        with pytest.raises(TlsRefused, match=says):
            StreamManager(node.base, token=node.token, tls_ca=node.tls_ca).create_scope("x")
        if name == "other-host":  # the host-name check off: the same connection gets in
            with StreamManager(
                node.base, token=node.token, tls_ca=node.tls_ca, validate_hostname=False
            ) as unchecked:
                assert unchecked.create_scope(f"h{uuid.uuid4().hex[:6]}")
    write_atomically(cert_file, new_cert.read_bytes())  # (back to a good one)
    write_atomically(key_file, new_key.read_bytes())
    eventually(lambda: _served(http_port, new_cert), 15, "good certificate back")


def _served(port: int, cert: Path) -> bool:
    """Whether ``port`` presents ``cert`` (its leaf), checked without trusting it."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    leaf = cert.read_text().split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n"
    return der == ssl.PEM_cert_to_DER_cert(leaf)


def test_a_spark_job_ingests_over_tls(node: Standalone, tmp_path: Path) -> None:
    """``millrace ingest --ca`` (the data source's ``trust_store`` option): local Spark's
    executors write over TLS to the controller and the segment store."""
    rows = tmp_path / "rows.json"
    rows.write_text("".join(json.dumps({"key": f"k{i % 9}", "event": f"s{i}"}) + "\n"
                            for i in range(400)))  # fmt: skip
    scope = f"spark{uuid.uuid4().hex[:6]}"
    done = cli(node, "ingest", str(rows), "--format", "json", "--stream", f"{scope}/st",
               "--create", "--segments", "2", "--key-column", "key", "--event-column", "event",
               "--token", node.token)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with node.manager() as manager:
        events = read_all(manager, scope, 400)
    assert sorted(events) == sorted(f"s{i}".encode() for i in range(400))
    # without the CA the job fails at once, saying why
    refused = cli(node, "ingest", str(rows), "--format", "json", "--stream", f"{scope}/st",
                  "--token", node.token, ca=False)  # fmt: skip
    assert refused.returncode != 0
    assert "signed by an unknown CA" in refused.stdout + refused.stderr


def test_the_readme_tail_readers_follow_over_wss(
    node: Standalone, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tail.py and resume.py, exactly as the README prints them, given an https:// URL and the
    CA file: both follow the stream over wss:// until it is sealed."""
    from tests.acceptance.test_node_heals import Program

    monkeypatch.setenv("MILLRACE_TLS_CA_FILE", str(node.tls_ca))
    with node.manager() as manager:
        scope = new_scope(manager)
        programs = [Program(name, node, f"{scope}/st", tmp_path) for name in ("tail", "resume")]
        try:
            writer = manager.create_writer(scope, "st")
            for i in range(200):
                writer.write_event(f"w{i}", routing_key=f"k{i % 4}")
            writer.flush()
            writer.close()
            for program in programs:
                assert sorted(program.wait_lines(200)) == sorted(f"w{i}" for i in range(200))
            path, sealed = f"/v1/scopes/{scope}/streams/st/state", {"streamState": "SEALED"}
            status, answer = request(node.base, "PUT", path, node.token, sealed, ca=node.tls_ca)
            assert status == 200, answer
            assert programs[1].wait() == 0, programs[1].err.read_text()[-3000:]
        finally:
            for program in programs:
                program.kill()


def test_pravega_s_python_api_over_tls(node: Standalone) -> None:
    """``pravega_compat`` with Pravega's TLS options: a ``tls://`` URI, ``tls_enabled``,
    ``trust_store``."""
    import millrace.client.pravega_compat as pravega_client

    manager = pravega_client.StreamManager(
        node.base.replace("https://", "tls://"), auth_enabled=True, tls_enabled=True,
        token=node.token, trust_store=node.tls_ca,
    )  # fmt: skip
    scope = f"pc{uuid.uuid4().hex[:6]}"
    assert manager.create_scope(scope)
    assert manager.create_stream(scope, "st", 1)
    writer = manager.create_writer(scope, "st")
    writer.write_event("over tls", routing_key="k")
    writer.flush()
    with pytest.raises(TlsRefused, match="unknown CA"):
        pravega_client.StreamManager(
            node.base, auth_enabled=True, tls_enabled=True, token=node.token
        ).create_scope("x")


def test_kafka_clients_speak_sasl_ssl(node: Standalone) -> None:
    """The Kafka port serves TLS with the node's certificate: confluent-kafka with
    ``SASL_SSL`` and the CA produces and consumes; one in plaintext gets nothing."""
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    settings = {
        "bootstrap.servers": f"localhost:{node.kafka_port}", "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(node.tls_ca), "sasl.mechanisms": "PLAIN",
        "sasl.username": "admin", "sasl.password": node.token,
    }  # fmt: skip
    producer = Producer(settings)
    for i in range(10):
        producer.produce("secured", value=f"s{i}")
    assert producer.flush(30) == 0
    consumer = Consumer({**settings, "group.id": "tls", "auto.offset.reset": "earliest"})
    consumer.subscribe(["secured"])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    assert got == [f"s{i}".encode() for i in range(10)]
    plain = {**settings, "security.protocol": "SASL_PLAINTEXT"}
    with pytest.raises(KafkaException):
        AdminClient(plain).list_topics(timeout=5)
