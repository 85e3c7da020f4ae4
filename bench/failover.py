"""Failover of a segment store node, timed as a writer sees it, at the default settings.

Starts a private PostgreSQL server and a cluster on loopback (``tests.acceptance.cluster``:
three segment store nodes on shared tiers, one controller, a worker and beat), every setting
at its default (session timeout 5 s, tier-2 flush after 4 MiB or 10 s). Then, per run:

1. a stream of 6 segments; a segment in a container of the victim node and a routing key
   that maps to it;
2. ``--fill-mib`` MiB written to that segment with the Python client's blocking writer (the
   README's ``write_event`` and ``flush``), so that tier-1 holds data to replay;
3. SIGKILL the victim; the same writer goes on, one event and one ``flush`` at a time;
4. the time from the kill to the first ``flush`` that returns (an acknowledged append on the
   moved container), and its parts from the processes' logs: until the leader moved the
   container (detection), until the new owner began recovering it, its recovery (until it
   runs), and the rest (the client finding the new node and sending again).

Prints one line per run, then the medians; the bytes of the container's tier-1 ledgers at the
kill are printed with them (what recovery replays, less what a checkpoint lets it skip).

    .venv/bin/python bench/failover.py [--repeat 3] [--fill-mib 64]
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from millrace.client.manager import StreamManager  # noqa: E402
from millrace.client.routing import key_point  # noqa: E402
from millrace.kernel.naming import container_for  # noqa: E402
from tests.acceptance.cluster import LocalCluster  # noqa: E402
from tests.acceptance.postgres import PrivatePostgres, postgres_bin  # noqa: E402
from tests.acceptance.standalone_node import eventually, free_ports, request  # noqa: E402

CONTAINERS = 6
EVENT_BYTES = 64 * 1024
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _stamp(line: str) -> float | None:
    found = _STAMP.match(line)
    if not found:
        return None
    when = dt.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f")
    return when.timestamp()


def _first(cluster: LocalCluster, names: list[str], text: str, after: float) -> float | None:
    """The time of the first line containing ``text`` in the logs of ``names``, after ``after``."""
    found = []
    for name in names:
        for line in cluster.processes[name].output().splitlines():
            when = _stamp(line)
            if when is not None and when >= after - 0.001 and text in line:
                found.append(when)
                break
    return min(found) if found else None


def _key_for(segment: dict[str, Any]) -> str:
    return next(
        key for i in range(100_000)
        if segment["keyStart"] <= key_point(key := f"k{i}") < segment["keyEnd"]
    )  # fmt: skip


def _tier1_bytes(cluster: LocalCluster, container: int) -> int:
    where = cluster.where / "shared" / "tier1" / f"container-{container}"
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file())


def one_run(cluster: LocalCluster, run: int, fill_mib: int) -> dict[str, float]:
    manager = StreamManager(cluster.base(), token=cluster.token)
    scope = f"failover{run}"
    manager.create_scope(scope)
    manager.create_stream(scope, "st", initial_segments=6)
    _, found = request(cluster.base(), "GET", f"/v1/scopes/{scope}/streams/st/segments",
                       cluster.token)  # fmt: skip
    owners = cluster.owners()
    live = sorted({n for n in owners.values()})
    victim = live[run % len(live)]
    segment = next(s for s in found["segments"]
                   if owners[container_for(s["name"], CONTAINERS)] == victim)  # fmt: skip
    container = container_for(segment["name"], CONTAINERS)
    key = _key_for(segment)
    writer = manager.create_writer(scope, "st")
    payload = b"x" * EVENT_BYTES
    for i in range(fill_mib * 1024 * 1024 // EVENT_BYTES):
        writer.write_event(payload, routing_key=key)
        if i % 64 == 63:
            writer.flush()
    writer.flush()
    in_tier1 = _tier1_bytes(cluster, container)
    killed = time.time()
    cluster.processes[victim].signal(signal.SIGKILL)
    writer.write_event(b"after the kill", routing_key=key)
    writer.flush()
    acknowledged = time.time()
    writer.close()
    manager.close()
    others = [n for n in live if n != victim]
    moved = _first(cluster, ["controller-0"], f"container {container}: {victim} ->", killed)
    taken = _first(cluster, others, f"container {container} assigned", killed)
    running = _first(cluster, others, f"container {container} running at epoch", killed)
    cluster.processes[victim].popen.wait(10)  # type: ignore[union-attr]
    cluster.start_node(int(victim.rsplit("-", 1)[1]))
    eventually(lambda: cluster.spread(), 120, "the victim rejoining")
    figures = {
        "total_s": acknowledged - killed,
        "detection_s": (moved or killed) - killed,
        "to_recovery_s": (taken or killed) - (moved or killed),
        "recovery_s": (running or killed) - (taken or killed),
        "tier1_mib": in_tier1 / 2**20,
    }
    figures["client_s"] = acknowledged - (running or acknowledged)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fill-mib", type=int, default=64)
    args = parser.parse_args()
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise SystemExit("needs PostgreSQL's server binaries (pg_ctl)")
    with tempfile.TemporaryDirectory(prefix="failover-") as where:
        Path(where).chmod(0o755)  # (PostgreSQL runs as its own user)
        postgres = PrivatePostgres(Path(where) / "pg", bin_dir, free_ports(1)[0])
        postgres.init()
        postgres.start()
        cluster = LocalCluster(Path(where) / "cluster", postgres.url, controllers=1,
                               containers=CONTAINERS,
                               environ={"MILLRACE_TIER2_FLUSH_DELAY_MS": "10000"})  # fmt: skip
        try:
            cluster.start()
            runs = []
            for run in range(args.repeat):
                figures = one_run(cluster, run, args.fill_mib)
                runs.append(figures)
                print(f"run {run + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()),
                      flush=True)  # fmt: skip
            print("median: " + ", ".join(
                f"{k} {statistics.median(r[k] for r in runs):.2f}" for k in runs[0]
            ))  # fmt: skip
        finally:
            cluster.close()
            postgres.stop()


if __name__ == "__main__":
    main()
