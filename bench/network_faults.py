"""Faults of the network and of processes, timed as a writer sees them, at the default settings.

Starts a private network of three hosts (network namespaces on a private /24:
``tests.acceptance.netns``; needs root and iproute2), a private PostgreSQL server and a
cluster whose segment store nodes each run in a host of their own (two controllers, a worker
and beats beside the bench), every setting at its default (session timeout 5 s). The Python
client's blocking writer, given both controllers (``http://a:9091,b:9091``), writes 2,000
events/s over 24 routing keys with a callback per event (the README's ``write_event``). Then,
``--repeat`` times each, one fault of ``--seconds`` at a time on the node serving the most keys
(``tests.acceptance.network_faults``):

* ``partition``: its link down; ``pause``: SIGSTOP; ``kill``: SIGKILL (restarted after);
* ``controller``: SIGKILL of the client's first controller (restarted after), a stream created
  meanwhile through the other.

Per run: the longest any routing key went unacknowledged from the fault until the cluster
settled (the target: at most 10 s, median of 3) and the lowest rate the other nodes' keys kept
while the fault lasted (the target: at least half). Then every acknowledged event is read back:
none lost, none twice, in order per key.

    .venv/bin/python bench/network_faults.py [--repeat 3] [--seconds 20] [--faults ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.acceptance.network_faults import (  # noqa: E402
    FaultResult,
    FaultRun,
    cluster_on_hosts,
    ready_for_hosts,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each fault lasts")
    parser.add_argument("--faults", default="partition,pause,kill,controller")
    args = parser.parse_args()
    if not ready_for_hosts():
        return 2
    results: dict[str, list[FaultResult]] = {}
    with tempfile.TemporaryDirectory() as where, cluster_on_hosts(Path(where)) as made:
        cluster, network = made
        run = FaultRun(cluster, network)
        try:
            for fault in args.faults.split(","):
                for n in range(args.repeat):
                    node = "controller-0" if fault == "controller" else run.victim()
                    result = run.apply(fault, node, args.seconds)
                    results.setdefault(fault, []).append(result)
                    print(f"run {n + 1}: {result.line()}", flush=True)
            wrong = run.finish()
        finally:
            run.close()
    print()
    print(
        f"{'fault':<11} {'longest unacknowledged (median)':>32} {'healthy keys kept (lowest)':>28}"
    )
    for fault, found in results.items():
        stalls = [r.recovered_s for r in found]
        median = statistics.median(s for s in stalls if s is not None) if all(stalls) else None
        shown = "stuck" if median is None else f"{median:.1f} s"
        runs = ", ".join("stuck" if s is None else f"{s:.1f}" for s in stalls)
        kept = min(r.healthy_ratio for r in found)
        print(f"{fault:<11} {shown:>10} ({runs}){'':>6} {kept:>20.0%}")
    print("read back:", wrong if wrong else "every acknowledged event once, in order")
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
