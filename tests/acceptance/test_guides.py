"""The guides and component pages a newcomer follows, executed as written (``executed_docs``):
the cluster guide against a fresh local cluster on a PostgreSQL server of the test's own, the
security guide's TLS recipe against the node it starts, the key-value table and Spark pages
against a fresh standalone node. Every block must succeed, and the ones that do not start a
node succeed again when run a second time.

The substitutions, each for the same reason: the documented ports are those of a machine
running one Millrace, and the tests run beside others, so each node listens on free ports and
the text's ``9091``, ``12345`` ... become them (and the cluster guide's ``pgrep`` pattern gets
the test's own directory, so that it never matches another test's cluster).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet
import pytest

from tests.acceptance.executed_docs import (
    blocks,
    node_ports,
    node_terminal,
    repository_like,
    run_block,
    start_block,
    user_env,
)
from tests.acceptance.postgres import PrivatePostgres
from tests.acceptance.standalone_node import (
    Standalone,
    eventually,
    free_port_run,
    free_ports,
    request,
    running_standalone,
)

pytestmark = pytest.mark.slow


def _stop(process: subprocess.Popen[bytes], output: Path) -> None:
    """SIGTERM to the block's process group (bash and the node it started), as Ctrl-C in a
    terminal reaches them all; every one of them must be gone within 90 s."""
    os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        process.poll()  # (reaps bash: a zombie would keep the group)
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError(f"did not stop:\n{output.read_text()[-3000:]}")


def _started(output: Path, line: str, timeout: float, data: Path) -> None:
    """Wait for the block's ``line``; a failure shows the end of what the block printed and
    the logs under ``data`` (a process that did not start says why there)."""
    try:
        eventually(lambda: line in output.read_text(), timeout, line)
    except AssertionError as exc:
        logs = sorted(data.rglob("*.log")) if data.is_dir() else []
        tails = [f"--- {p.name}:\n{p.read_text(errors='replace')[-1500:]}" for p in logs]
        raise AssertionError("\n".join([str(exc), output.read_text()[-3000:], *tails])) from None


def _cluster_spread(http: int, token: str) -> bool:
    try:
        status, found = request(f"http://127.0.0.1:{http}", "GET", "/v1/cluster", token)
    except OSError:
        return False
    return status == 200 and len([n for n in found["nodes"] if n["containers"]]) == 3


def test_the_cluster_guide_runs_as_written(postgres: PrivatePostgres, tmp_path: Path) -> None:
    """The local cluster starts as the guide types it (its database created on the way), the
    status command works from a second terminal, and pausing node-1 moves its containers.
    Then what a user does with it: events written through one controller are read through the
    other and by a WebSocket tail with its token in the URL; SIGTERM stops every process, and
    nothing any of them printed or logged holds a credential."""
    where = repository_like(tmp_path / "cwd")
    http, grpc = free_port_run(2), free_port_run(2)
    wire, metrics = free_port_run(3), free_port_run(3)
    start, status, pause = blocks("docs/guides/cluster.md")
    assert all(language == "sh" for language, _ in (start, status, pause))
    output = tmp_path / "cluster.out"
    process = start_block(
        where, *start, user_env({"MILLRACE_SEGMENTSTORE_METRICS_PORT": str(metrics)}), output,
        {"127.0.0.1:5432": f"127.0.0.1:{postgres.port}",
         "--data-dir ./cluster\n": f"--data-dir ./cluster --http-port {http} --grpc-port {grpc}"
                                   f" --segmentstore-port {wire}\n"},
    )  # fmt: skip
    try:
        _started(output, "The local cluster is running", 180, where / "cluster")
        assert "created the PostgreSQL database 'millrace'" in output.read_text()
        token = (where / "cluster" / "admin-token").read_text().strip()
        eventually(lambda: _cluster_spread(http, token), 60, "containers on all three nodes")
        second_terminal = user_env({"MILLRACE_URL": f"http://127.0.0.1:{http}"})
        shown = run_block(where, *status, second_terminal)
        assert "leader: controller-" in shown and "node-1" in shown
        shown = run_block(where, *pause, second_terminal,
                          {"'cluster/node-1 '": f"'{where}/cluster/node-1 '"})  # fmt: skip
        node_1 = next(line for line in shown.splitlines() if line.startswith("node-1 "))
        assert node_1.split()[-1] == "-", shown  # its containers moved to the others
        eventually(lambda: _cluster_spread(http, token), 60, "node-1 given its share back")
        _use(http, token, metrics)
    finally:
        _stop(process, output)
    assert "millrace cluster local: stopped" in output.read_text()
    data = where / "cluster"
    secrets = [token, (data / "admin-password").read_text().strip()]
    secrets += [path.read_text().strip() for path in (data / "secrets").iterdir()]
    logs = [output.read_text()] + [p.read_text(errors="replace") for p in data.rglob("*.log")]
    assert len(secrets) >= 4 and not any(s in text for s in secrets for text in logs)


def _use(http: int, token: str, metrics: int) -> None:
    """The leader named by its controller, every node's metrics port, events through both
    controllers and a WebSocket tail with the token in its URL (as the README's tail.py)."""
    from websockets.sync.client import connect

    from millrace.client.manager import StreamManager

    status = request(f"http://127.0.0.1:{http}", "GET", "/v1/cluster", token)[1]
    controllers = {n["nodeId"] for n in status["nodes"] if n["role"] == "controller"}
    assert status["leader"] is not None and status["leader"]["node"] in controllers
    serving = [n for n in status["nodes"] if n["containers"]]
    assert sorted(n["metricsPort"] for n in serving) == [metrics, metrics + 1, metrics + 2]
    with StreamManager(f"http://127.0.0.1:{http}", token=token) as writer:
        writer.create_scope("try")
        writer.create_stream("try", "it", initial_segments=4)
        with writer.create_writer("try", "it") as events:
            for i in range(100):
                events.write_event(f"event {i}", routing_key=f"k{i % 10}")
    with StreamManager(f"http://127.0.0.1:{http + 1}", token=token) as reader:
        got = reader.create_reader("try", "it")
        seen = {bytes(e.data) for e in iter(lambda: got.read_next(timeout=10), None)}
    assert seen == {f"event {i}".encode() for i in range(100)}
    with connect(f"ws://127.0.0.1:{http + 1}/ws/streams/try/it?from=head&token={token}",
                 open_timeout=30) as tail:  # fmt: skip
        assert '"subscribed"' in str(tail.recv(timeout=30))
        assert '"type":"events"' in str(tail.recv(timeout=30))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory, "guides", {})


def test_the_kvt_page_runs_as_written(node: Standalone, tmp_path: Path) -> None:
    where = repository_like(tmp_path / "cwd", node.data_dir)
    env, substitutions = node_terminal(node), node_ports(node)
    node.manager().create_scope("demo")
    [(language, text)] = blocks("docs/components/kvt.md")
    for _ in range(2):
        shown = run_block(where, language, text, env, substitutions)
        assert '"name": "Ada Lovelace"' in shown or "Ada Lovelace" in shown, shown


@pytest.mark.timeout(900)  # (three Spark jobs, each a JVM of its own)
def test_the_spark_page_runs_as_written(node: Standalone, tmp_path: Path) -> None:
    """The page's Python examples in one PySpark program, one after the other as a user types
    them into the shell whose ``spark`` it gives (one Spark for the page): the first copies the
    README's ``demo/orders`` into ``demo/copy`` in capitals, the second writes and reads typed
    records. Then its bulk ingest and export, as ``millrace`` commands. (The bulk block run a
    second time, appending and overwriting its export, is ``tests/spark/test_jobs.py``'s, on
    the shared Spark: twice here was two more JVMs for nothing the page says.)"""
    where = repository_like(tmp_path / "cwd", node.data_dir)
    env, substitutions = node_terminal(node), node_ports(node)
    manager = node.manager()
    manager.create_scope("demo")
    for name in ("orders", "copy"):
        manager.create_stream("demo", name, initial_segments=2)
    with manager.create_writer("demo", "orders") as writer:
        for i in range(20):
            writer.write_event(f"order {i}", routing_key=f"customer-{i % 3}")
    (language, example), (_, typed), (bulk_language, bulk), (_, tuning) = blocks(
        "docs/components/spark.md"
    )
    assert language == "python"
    shell = "from pyspark.sql import SparkSession\n"
    shell += 'spark = SparkSession.builder.master("local[1]").getOrCreate()\n'
    shown = run_block(where, "python", shell + example + typed, env, substitutions)
    reader = manager.create_reader("demo", "copy")
    copied = {bytes(e.data) for e in iter(lambda: reader.read_next(timeout=5), None)}
    assert copied == {f"ORDER {i}".encode() for i in range(20)}
    assert "|   s-1|   21.5|" in shown and "|   s-2|   19.0|" in shown, shown
    shown = run_block(where, bulk_language, bulk, env, substitutions)
    assert "ingested into demo/bulk: 3 events" in shown, shown
    assert "exported demo/bulk to" in shown
    line = shown[shown.index("spark-submit ") :].splitlines()[0]
    assert "spark_bridge/jobs/ingest.py" in line and '"$MILLRACE_TOKEN"' in line, line
    assert node.token not in line  # (a cluster's line names the variable, never the token)
    assert pyarrow.parquet.read_table(where / "bulk-export").num_rows == 3
    assert "maxBytesPerBatch" in tuning  # (a setting for one's own session: not run alone)
    manager.close()


def test_the_security_guide_runs_as_written(tmp_path: Path) -> None:
    """The development CA and certificate, a node with TLS on every port, the status check and
    curl over TLS, a rotation of the token secret and of the administrator's token after which
    the command line still works. A block naming ``/etc/millrace`` is a deployment's files, not
    run."""
    where = repository_like(tmp_path / "cwd")
    http, wire, grpc, metrics = free_ports(4)
    found = [b for b in blocks("docs/guides/security.md") if "/etc/millrace" not in b[1]]
    start, *then = found
    output = tmp_path / "node.out"
    process = start_block(
        where, *start, user_env({"MILLRACE_SEGMENTSTORE_METRICS_PORT": str(metrics)}), output,
        {"millrace standalone\n": f"millrace standalone --http-port {http} --grpc-port {grpc}"
                                  f" --segmentstore-port {wire}\n"},
    )  # fmt: skip
    try:
        eventually(lambda: "Millrace is running" in output.read_text(), 180, "the TLS node")
        assert "TLS on every port" in output.read_text()
        second_terminal = user_env({})
        for _ in range(2):
            ported = {"localhost:9091": f"localhost:{http}"}
            shown = [run_block(where, *block, second_terminal, ported) for block in then]
            assert "UP" in shown[0] and '"scopes"' in shown[0], shown[0]
            assert "signing" in shown[1], shown[1]
            # the rotated token is the one data/admin-token holds (the scope list after it
            # worked with it)
            assert (where / "data" / "admin-token").read_text().strip() in shown[2]
    finally:
        _stop(process, output)
    token = (where / "data" / "admin-token").read_text().strip()
    assert token and token not in output.read_text()


def test_the_kafka_guide_runs_as_written(node: Standalone, tmp_path: Path) -> None:
    """Each example of the Kafka clients' guide, in order, against the module's node (its free
    Kafka port in place of 9092)."""
    where = repository_like(tmp_path / "cwd", node.data_dir)
    env = node_terminal(node)
    substitutions = node_ports(node) | {"127.0.0.1:9092": f"127.0.0.1:{node.kafka_port}"}
    shown = [run_block(where, language, text, env, substitutions)
             for language, text in blocks("docs/guides/kafka.md")]  # fmt: skip
    kcat, confluent, kafka_python, aiokafka, millrace, avro = shown
    assert kcat.splitlines()[:3] == ["0 alice signed up", "1 bob signed up", "2 alice paid"]
    assert 'topic "signups" with 1 partitions' in kcat
    assert len(confluent.splitlines()) == 9 and "b'order 8'" in confluent
    assert "b'order 9'" in kafka_python
    assert "b'paid 10'" in aiokafka
    assert "10 events" in millrace
    assert "kafka.typed-orders-value" in avro
