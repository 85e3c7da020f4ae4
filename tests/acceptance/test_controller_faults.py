"""One controller of two loses the database: clients given both go on, and nobody is evicted.

A three-node cluster on loopback (``tests.acceptance.cluster``) on a PostgreSQL server of the
test's own, whose first controller reaches the database through a proxy the test cuts
(``tests.acceptance.faulty_proxy``). Two reader-group readers and a writer, each given both
controllers with the cut one first (``http://c0,c1``), run through 40 s of controller-0 refusing
every database connection (twice the group's reader timeout): controller-0 answers 503, the
clients move to controller-1, the leader's lease is held by a controller that reaches the
database, no reader is declared dead, no container moves, and after the stream is sealed every
event written is read exactly once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.cluster import LocalCluster
from tests.acceptance.faulty_proxy import FaultyProxy
from tests.acceptance.postgres import PrivatePostgres
from tests.acceptance.standalone_node import eventually, request
from tests.acceptance.test_connection_faults import Collector

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CUT_SECONDS = 40.0
READER_TIMEOUT_MS = 20_000


@pytest.fixture
def cluster(
    postgres: PrivatePostgres, tmp_path: Path
) -> Iterator[tuple[LocalCluster, FaultyProxy]]:
    proxy = FaultyProxy(postgres.port)
    made = LocalCluster(tmp_path, postgres.url)
    made.controller_env[0] = {
        "DATABASE_URL": postgres.url.replace(f":{postgres.port}/", f":{proxy.port}/")
    }
    try:
        for running in made.running():
            yield running, proxy
    finally:
        proxy.close()


def test_a_controller_cut_from_the_database_costs_its_clients_nothing(
    cluster: tuple[LocalCluster, FaultyProxy],
) -> None:
    made, proxy = cluster
    both = f"{made.base(0)},{made.base(1)}"
    manager = StreamManager(both, token=made.token)
    scope = f"g{uuid.uuid4().hex[:8]}"
    manager.create_scope(scope)
    manager.create_stream(scope, "st", initial_segments=4)
    manager.create_reader_group(scope, "rg", [f"{scope}/st"], reader_timeout_ms=READER_TIMEOUT_MS)
    group = manager.reader_group(scope, "rg")
    readers = [Collector(group.create_reader(name)) for name in ("a", "b")]
    for reader in readers:
        reader.start()
    writer = manager.create_writer(scope, "st")
    written: list[str] = []

    def write(count: int) -> None:
        for _ in range(count):
            text = f"e{len(written)}"
            writer.write_event(text, routing_key=f"k{len(written) % 16}")
            written.append(text)
        writer.flush()

    try:
        write(500)
        owners = made.owners(1)
        proxy.refuse(True)
        cut_until = time.monotonic() + CUT_SECONDS
        while time.monotonic() < cut_until:
            write(50)
            time.sleep(0.5)
        status, answer = request(made.base(0), "GET", f"/v1/scopes/{scope}", made.token)
        assert status == 503, (status, answer)  # (still cut: the clients went around it)
        proxy.refuse(False)
        write(500)
        assert made.owners(1) == owners, "a container moved"
        members = request(made.base(1), "GET", f"/v1/scopes/{scope}/readergroups/rg", made.token)
        assert sorted(r["readerId"] for r in members[1]["readers"]) == ["a", "b"], members
        manager.seal_stream(scope, "st")
        for reader in readers:
            reader.join(120)
            assert not reader.is_alive(), "a reader is stuck"
            assert reader.error is None, repr(reader.error)
        seen = sorted(event for reader in readers for event in reader.seen)
        assert seen == sorted(written), f"{len(seen)} read, {len(written)} written"
        eventually(lambda: made.status(1)["leader"] is not None, 30, "a leader")
    finally:
        writer.close()
        manager.close()
