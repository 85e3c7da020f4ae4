"""A scope held to its append-rate quota across a three-node cluster, next to one without.

Targets (issue 48): the throttled scope's append rate within ±10 % of its quota over 60 s,
cluster-wide; an unthrottled scope beside it at no less than 90 % of its rate alone.

A private PostgreSQL server and ``tests.acceptance.cluster.LocalCluster`` (three segment store
nodes, one controller, a worker, two beats). Two scopes: ``lim`` with ``--quota`` bytes per
second of appends, its four streams of 6 segments (on every node); ``free`` without a quota.
Each writer is a process of its own with the blocking writer as the README shows it: 500-byte
events, a ``flush()`` every 20, writing for the phase, noting how many were acknowledged each
second. The phases:

1. ``free`` alone (one writer) for ``--seconds``: its rate alone;
2. ``lim`` (one writer per stream, ``--lim-writers``, four by default) and ``free`` (one
   writer) together for ``--seconds``;
3. with ``--control``: ``peer``, a scope without a quota whose writers (as many as ``lim``'s)
   pace themselves to ``--quota`` in all, and ``free`` together: what the same bytes cost
   ``free`` with no quota at work, so that phase 2 less phase 3 is what the quota costs.

Rates are counted over the phase less its first 5 s (the writers connecting).

    .venv/bin/python bench/quotas.py [--quota 500000] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.acceptance.cluster import LocalCluster  # noqa: E402
from tests.acceptance.postgres import PrivatePostgres, postgres_bin  # noqa: E402
from tests.acceptance.standalone_node import free_ports, request  # noqa: E402

EVENT = b"q" * 500
WARM_SECONDS = 5.0


def _child(base: str, token: str, scope: str, stream: str, seconds: float, out: Path,
           pace: float = 0.0) -> None:  # fmt: skip
    """Write for ``seconds``; with ``pace``, no more than that many bytes a second."""
    from millrace.client.manager import StreamManager

    acked, marks = 0, []
    started = time.monotonic()
    with StreamManager(base, token=token) as manager, manager.create_writer(scope, stream) as w:
        while (now := time.monotonic()) - started < seconds:
            if pace and acked * len(EVENT) > pace * (now - started):
                time.sleep(20 * len(EVENT) / pace)
                continue
            for i in range(20):
                w.write_event(EVENT, routing_key=f"k{i}")
            w.flush()
            acked += 20
            marks.append((time.time(), acked))
    out.write_text(json.dumps(marks))


def _writers(
    cluster: LocalCluster,
    scope: str,
    streams: list[str],
    seconds: float,
    where: Path,
    pace: float = 0.0,
) -> list[tuple[subprocess.Popen[bytes], Path]]:
    found = []
    for stream in streams:
        out = where / f"{scope}-{stream}-{time.monotonic_ns()}.json"
        proc = subprocess.Popen([sys.executable, __file__, "--child", cluster.base(), cluster.token,
                                 scope, stream, str(seconds), str(out), str(pace)])  # fmt: skip
        found.append((proc, out))
    return found


def _rate(found: list[tuple[subprocess.Popen[bytes], Path]], start: float, end: float) -> float:
    """Bytes per second the writers had acknowledged between ``start`` and ``end``."""
    total = 0
    for proc, out in found:
        assert proc.wait(600) == 0
        marks = json.loads(out.read_text())
        at_start = max((n for t, n in marks if t <= start), default=0)
        at_end = max((n for t, n in marks if t <= end), default=0)
        total += at_end - at_start
    return total * len(EVENT) / (end - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quota", type=int, default=500_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--lim-writers", type=int, default=4, choices=range(1, 5),
                        help="writer processes of the limited scope, one per stream")  # fmt: skip
    parser.add_argument("--control", action="store_true",
                        help="also: as many bytes through a scope with no quota")  # fmt: skip
    parser.add_argument("--child", nargs=7)
    args = parser.parse_args()
    if args.child:
        base, token, scope, stream, seconds, out, pace = args.child
        _child(base, token, scope, stream, float(seconds), Path(out), float(pace))
        return
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise SystemExit("needs PostgreSQL's server binaries (pg_ctl)")
    with tempfile.TemporaryDirectory(prefix="quota-bench-") as tmp:
        where = Path(tmp)
        where.chmod(0o755)  # (PostgreSQL runs as its own user)
        postgres = PrivatePostgres(where / "pg", bin_dir, free_ports(1)[0])
        postgres.init()
        postgres.start()
        cluster = LocalCluster(where / "cluster", postgres.url, nodes=3, controllers=1,
                               environ={"MILLRACE_CANARY_PERIOD_S": "0"})  # fmt: skip
        try:
            cluster.start()
            figures = measure(cluster, args.quota, args.seconds, where, args.lim_writers,
                              args.control)  # fmt: skip
        finally:
            cluster.close()
            postgres.stop()
    print(json.dumps(figures, indent=2))


def measure(
    cluster: LocalCluster,
    quota: int,
    seconds: float,
    where: Path,
    lim_writers: int,
    control: bool = False,
) -> dict[str, float]:
    from millrace.client.manager import StreamManager

    base, token = cluster.base(), cluster.token
    with StreamManager(base, token=token) as manager:
        for scope in ("lim", "free", "peer"):
            manager.create_scope(scope)
            for stream in ("a", "b", "c", "d"):
                manager.create_stream(scope, stream, initial_segments=6)
    assert request(base, "PUT", "/v1/scopes/lim/quota", token,
                   {"appendBytesPerSecond": quota})[0] == 200  # fmt: skip
    time.sleep(3)
    started = time.time()
    alone = _writers(cluster, "free", ["a"], seconds, where)
    alone_rate = _rate(alone, started + WARM_SECONDS, started + seconds)
    print(f"free alone: {alone_rate:,.0f} B/s", flush=True)
    started = time.time()
    lim = _writers(cluster, "lim", ["a", "b", "c", "d"][:lim_writers], seconds, where)
    free = _writers(cluster, "free", ["b"], seconds, where)
    lim_rate = _rate(lim, started + WARM_SECONDS, started + seconds)
    free_rate = _rate(free, started + WARM_SECONDS, started + seconds)
    print(f"together: lim {lim_rate:,.0f} B/s (quota {quota:,}), free {free_rate:,.0f} B/s",
          flush=True)  # fmt: skip
    figures = {
        "quota": quota, "seconds": seconds, "lim_writers": lim_writers, "lim": lim_rate,
        "lim_vs_quota": lim_rate / quota,
        "free_alone": alone_rate, "free_beside": free_rate,
        "free_beside_vs_alone": free_rate / alone_rate,
    }  # fmt: skip
    if control:
        started = time.time()
        streams = ["a", "b", "c", "d"][:lim_writers]
        peer = _writers(cluster, "peer", streams, seconds, where, pace=quota / lim_writers)
        free = _writers(cluster, "free", ["c"], seconds, where)
        peer_rate = _rate(peer, started + WARM_SECONDS, started + seconds)
        free_rate = _rate(free, started + WARM_SECONDS, started + seconds)
        print(f"control: peer {peer_rate:,.0f} B/s (paced), free {free_rate:,.0f} B/s", flush=True)
        figures |= {"peer": peer_rate, "free_beside_peer": free_rate,
                    "free_beside_peer_vs_alone": free_rate / alone_rate}  # fmt: skip
    return figures


if __name__ == "__main__":
    main()
