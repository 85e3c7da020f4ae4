"""What TLS costs a writer: durable 100-byte appends through the blocking writer, a standalone node
with TLS on every port next to one without, in one run.

Each set-up is ``millrace standalone`` on embedded defaults (SQLite, file tier-1 with fsync,
filesystem tier-2); the TLS one has ``MILLRACE_TLS_ENABLED`` with a certificate of a test CA
(``trustme``: ECDSA P-256, as the tests make them), and the client trusts that CA
(``tls_ca``). The workload, each time: a new stream of 6 segments; one Python client writing
``--events`` events of 100 bytes over 60 routing keys with the blocking writer
(``write_event``, then ``flush``: every event durable when it returns), timed from the first
write to the flush's return; then the same events read back (``read_batch``). The set-ups
alternate ``--repeat`` times; both nodes run for the whole run, one of them idle while the
other is measured.

    .venv/bin/python bench/tls.py [--events 300000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.services import write_and_read  # noqa: E402
from tests.acceptance.certs import Certs  # noqa: E402
from tests.acceptance.standalone_node import READY_LINE, Standalone, free_ports  # noqa: E402

KEYS = 60
#: The target: the TLS rate at least this share of the plaintext rate.
TARGET = 0.70


def workload(node: Standalone, events: int) -> tuple[float, float]:
    """(events/s written, events/s read) through the Python client (TLS when the node has it)."""
    with node.manager() as manager:
        return write_and_read(manager, events, KEYS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"plaintext": [], "tls": []}
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as scratch:
        where = Path(scratch)
        certs = Certs(where / "certs")
        env = {"plaintext": {}, "tls": certs.env(*certs.issue("node"))}
        nodes = {}
        try:
            for setup in results:
                http, wire, metrics = free_ports(3)
                nodes[setup] = Standalone(
                    where / setup, http, wire,
                    env={"MILLRACE_SEGMENTSTORE_METRICS_PORT": str(metrics), **env[setup]},
                )  # fmt: skip
                nodes[setup].wait_for(READY_LINE)
            for _ in range(args.repeat):
                for setup, node in nodes.items():
                    results[setup].append(workload(node, args.events))
                    w, r = results[setup][-1]
                    print(f"{setup}: write {w:,.0f} events/s, read {r:,.0f} events/s", flush=True)
        finally:
            for node in nodes.values():
                node.kill()
    for i, what in ((0, "write"), (1, "read")):
        plain = statistics.median(run[i] for run in results["plaintext"])
        tls = statistics.median(run[i] for run in results["tls"])
        print(f"median {what}: plaintext {plain:,.0f}, TLS {tls:,.0f} events/s "
              f"({100 * tls / plain:.0f} % of plaintext)")  # fmt: skip
    plain = statistics.median(w for w, _ in results["plaintext"])
    tls = statistics.median(w for w, _ in results["tls"])
    print(f"target: TLS writes at least {TARGET:.0%} of plaintext: "
          f"{'MET' if tls >= TARGET * plain else 'NOT MET'}")  # fmt: skip


if __name__ == "__main__":
    main()
