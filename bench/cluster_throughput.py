"""What coordination costs: one node of its own next to a three-node cluster, in one run.

Both on a private PostgreSQL server, both with the file tier-1 and the filesystem tier-2:

* **one node**: ``millrace standalone`` (its segment store static: every container, no session,
  no leader);
* **cluster**: ``tests.acceptance.cluster.LocalCluster``: three segment store nodes renewing
  their sessions every second, one controller leading (a round every second), a worker and two
  beats (one ticking), sharing one tier-1 root and one tier-2.

The workload, each time: a new stream of 6 segments, one Python client writing ``--events``
events of 100 bytes over 60 routing keys with the blocking writer (``write_event``, then
``flush``), timed from the first write to the flush's return; then the same events read back
with a reader (``read_batch``), timed likewise. The two set-ups alternate ``--repeat`` times.
On this machine's two cores every process of both set-ups shares the same CPUs, so the figures
show what the cluster's coordination costs a client, not what more machines would add.

Also printed: the session renewals the metadata database takes per second in the cluster
(each one UPDATE and one SELECT of the node's assignments; the leader's round adds a lease
UPDATE, one SELECT of the nodes and one of the assignments per second).

    .venv/bin/python bench/cluster_throughput.py [--events 200000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.services import write_and_read  # noqa: E402
from millrace.client.manager import StreamManager  # noqa: E402
from tests.acceptance.cluster import LocalCluster  # noqa: E402
from tests.acceptance.postgres import PrivatePostgres, postgres_bin  # noqa: E402
from tests.acceptance.standalone_node import READY_LINE, Standalone, free_ports  # noqa: E402

KEYS = 60


def workload(base: str, token: str, events: int) -> tuple[float, float]:
    """(events/s written, events/s read) through the Python client."""
    with StreamManager(base, token=token) as manager:
        return write_and_read(manager, events, KEYS)


def renewals_per_second(cluster: LocalCluster, seconds: float = 5.0) -> float:
    """Session renewals the database took per second (every node's and controller's)."""

    with psycopg.connect(cluster.database_url) as db:
        first = db.execute("select coalesce(sum(renewals), 0) from controller_app_node").fetchone()
        time.sleep(seconds)
        last = db.execute("select coalesce(sum(renewals), 0) from controller_app_node").fetchone()
    assert first is not None and last is not None
    return float(last[0] - first[0]) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise SystemExit("needs PostgreSQL's server binaries (pg_ctl)")
    results: dict[str, list[tuple[float, float]]] = {"one node": [], "cluster": []}
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as where:
        Path(where).chmod(0o755)  # (PostgreSQL runs as its own user)
        postgres = PrivatePostgres(Path(where) / "pg", bin_dir, free_ports(1)[0])
        postgres.init()
        postgres.start()
        try:
            for _ in range(args.repeat):
                for setup in results:
                    results[setup].append(run(setup, Path(where), postgres, args.events))
                    w, r = results[setup][-1]
                    print(f"{setup}: write {w:,.0f} events/s, read {r:,.0f} events/s", flush=True)
        finally:
            postgres.stop()
    one = statistics.mean(w for w, _ in results["one node"])
    three = statistics.mean(w for w, _ in results["cluster"])
    print(f"mean write: one node {one:,.0f}, cluster {three:,.0f} events/s "
          f"({100 * (three - one) / one:+.1f} %)")  # fmt: skip
    one = statistics.mean(r for _, r in results["one node"])
    three = statistics.mean(r for _, r in results["cluster"])
    print(f"mean read: one node {one:,.0f}, cluster {three:,.0f} events/s "
          f"({100 * (three - one) / one:+.1f} %)")  # fmt: skip


def run(setup: str, where: Path, postgres: PrivatePostgres, events: int) -> tuple[float, float]:
    database = f"b{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres.url, autocommit=True) as db:
        db.execute(f"create database {database}")
    url = postgres.url.rsplit("/", 1)[0] + f"/{database}"
    here = where / database
    if setup == "one node":
        node = Standalone(here, *free_ports(2), services={"DATABASE_URL": url})
        try:
            node.wait_for(READY_LINE)
            return workload(node.base, node.token, events)
        finally:
            node.kill()
    cluster = LocalCluster(here, url, nodes=3, controllers=1,
                           environ={"MILLRACE_TIER2_FLUSH_DELAY_MS": "10000"})  # fmt: skip
    try:
        cluster.start()
        figures = workload(cluster.base(), cluster.token, events)
        print(f"cluster: {renewals_per_second(cluster):.1f} session renewals/s in the database",
              flush=True)  # fmt: skip
        return figures
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
