"""Appends with grants judged next to appends without: the cost of authorization.

Target (issue 48): authorization costs the blocking writer's appends (100 B events) at most 2 %.

One ``millrace standalone`` node (embedded defaults) holding 200 grants of other users and
groups. Each run is a child process writing ``--events`` events of 100 bytes through the
blocking writer, as the README shows, with a ``flush()`` every ``--flush-every`` events; the
runs, interleaved ``--rounds`` times:

* ``off``: the node's admin (an admin is never judged by grants: the path before them);
* ``on``: a team's user whose grants (its own, and its group's, among the 200) allow
  ``READ_UPDATE`` on the stream by a pattern, with a denial on another stream to look at.

What grants add is paid where a token is minted (one query of the user's grants per REST call)
and never per event: the segment store checks each request's segment against the token as it
did before grants.

Usage::

    .venv/bin/python bench/grants.py
    .venv/bin/python bench/grants.py --events 5000 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import services

CASES = ("off", "on")


def _child(args: argparse.Namespace) -> None:
    services.timed_writes(args.base, args.token, "st", args.events, args.flush_every)


def _millrace(data_dir: Path, *args: str) -> str:
    env = {**os.environ, "MILLRACE_DATA_DIR": str(data_dir)}
    done = subprocess.run([sys.executable, "-m", "millrace.ops.cli", *args], env=env,
                          capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    return done.stdout


def _team_token(data_dir: Path) -> str:
    """A user with no role whose grants allow the stream (and 200 grants of others)."""
    token = _millrace(data_dir, "user", "create", "writer", "--role", "viewer").splitlines()[-1]
    lines = ["# 200 grants of others"]
    for i in range(100):
        lines.append(f"acl grant user:writer READ prn::/scope:other{i}/stream:s")
        lines.append(f"acl grant group:team{i} READ_UPDATE prn::/scope:team{i}*")
    for line in lines[1:]:
        _millrace(data_dir, *line.split())
    _millrace(data_dir, "acl", "grant", "group:bench", "READ_UPDATE", "prn::/scope:bench/*")
    _millrace(data_dir, "acl", "join", "bench", "writer")
    _millrace(data_dir, "acl", "deny", "user:writer", "READ", "prn::/scope:bench/stream:other")
    return token


def _run(case: str, base: str, token: str, args: argparse.Namespace) -> float:
    found = services.child_result([__file__, "--child", case, "--base", base, "--token", token,
                                   "--events", str(args.events),
                                   "--flush-every", str(args.flush_every)])  # fmt: skip
    return float(found["events_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--flush-every", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", choices=CASES)
    parser.add_argument("--base")
    parser.add_argument("--token")
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    from millrace.client.manager import StreamManager

    rates: dict[str, list[float]] = {case: [] for case in CASES}
    with (
        tempfile.TemporaryDirectory() as tmp,
        services.standalone_node(Path(tmp)) as (base, admin, _),
    ):
        with StreamManager(base, token=admin) as manager:
            manager.create_scope("bench")
            manager.create_stream("bench", "st", 4)
        tokens = {"off": admin, "on": _team_token(Path(tmp) / "standalone")}
        for round_ in range(args.rounds):
            for case in CASES:
                rates[case].append(_run(case, base, tokens[case], args))
                print(f"round {round_ + 1} {case}: {rates[case][-1]:,.0f} events/s",
                      file=sys.stderr)  # fmt: skip
    medians = {case: statistics.median(found) for case, found in rates.items()}
    print(json.dumps({
        "events": args.events, "flush_every": args.flush_every, "rates": rates,
        "median": medians, "on_vs_off": medians["on"] / medians["off"],
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
