"""A small cluster with TLS on every port and mutual TLS on the segment store's: the nodes
advertise ``tls://``, the controllers and workers reach them with their own certificates, a
client with a certificate writes and reads and follows a container moved off a killed node, and
one without a certificate is refused saying so."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.client.manager import StreamManager
from millrace.kernel.tls import TlsRefused
from tests.acceptance.certs import Certs
from tests.acceptance.cluster import LocalCluster
from tests.acceptance.postgres import PrivatePostgres
from tests.acceptance.standalone_node import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def cluster(postgres: PrivatePostgres, tmp_path: Path) -> Iterator[LocalCluster]:
    yield from LocalCluster(
        tmp_path, postgres.url, nodes=2, controllers=1, containers=4,
        certs=Certs(tmp_path / "certs"),
    ).running()  # fmt: skip


def client(cluster: LocalCluster, **more: Any) -> StreamManager:
    assert cluster.client_cert is not None
    cert, key = cluster.client_cert
    options = {"tls_ca": cluster.tls_ca, "tls_cert": cert, "tls_key": key, **more}
    return StreamManager(cluster.base(), token=cluster.token, **options)


def test_a_mutual_tls_cluster_serves_and_fails_over(cluster: LocalCluster) -> None:
    nodes = [n for n in cluster.status()["nodes"] if n["role"] == "segment store"]
    assert len(nodes) == 2 and all(n["tls"] for n in nodes)
    scope = f"ct{uuid.uuid4().hex[:6]}"
    written: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    with client(cluster) as manager:
        manager.create_scope(scope)
        manager.create_stream(scope, "st", initial_segments=4)  # (on both nodes)

        def write() -> None:
            try:
                writer = manager.create_writer(scope, "st")
                n = 0
                while not stop.is_set():
                    batch = [f"e{n + i}" for i in range(10)]
                    for event in batch:
                        writer.write_event(event, routing_key=event[-1])
                    writer.flush()
                    written.extend(batch)
                    n += len(batch)
                writer.close()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=write)
        thread.start()
        time.sleep(2)
        victim = cluster.owners()[0]
        cluster.processes[victim].signal(signal.SIGKILL)
        eventually(lambda: cluster.spread({n["nodeId"] for n in nodes} - {victim}), 60,
                   "the killed node's containers moved")  # fmt: skip
        time.sleep(2)
        stop.set()
        thread.join(120)
        assert not errors, errors
        reader = manager.create_reader(scope, "st")
        seen: list[str] = []
        deadline = time.monotonic() + 120
        while len(seen) < len(written) and time.monotonic() < deadline:
            event = reader.read_next(timeout=1.0)
            if event is not None:
                seen.append(event.data.decode())
        reader.close()
    assert sorted(seen) == sorted(written) and len(written) > 100

    # a client without a certificate gets the REST API (tokens) but not the segment store
    with StreamManager(cluster.base(), token=cluster.token, tls_ca=cluster.tls_ca) as bare:
        assert not bare.create_scope(scope)  # (it exists)
        writer = bare.create_writer(scope, "st")
        with pytest.raises(TlsRefused, match="asks for a client certificate"):
            writer.write_event("x", routing_key="x")
            writer.flush()
