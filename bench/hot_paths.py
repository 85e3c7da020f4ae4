"""The hot paths of two (or more) checkouts side by side, in one run: what guards a change to
the append path or the table path against getting slower.

For each ``--checkout`` (a directory holding a tree of this project, e.g. made with ``git
worktree add /tmp/before <commit>``; default: this tree), in turn, ``--rounds`` times:

* ``small_requests.py``: a lone 1 KiB key-value ``put`` and a lone ``write_event`` + ``flush``
  through the blocking clients, one call at a time (``--requests`` of each), with the
  segment store's CPU per call from ``/proc`` (the figures of issue 58's item 7);
* ``server_blocks.py``: the node's CPU per append block of 1, 8 and 100 events;
* ``sdk_client.py --only blocking``: the blocking writer's events/s (``write_event`` loop and
  ``flush``).

Every script is this tree's (the same measurement for every checkout); the code they drive,
the client's and the node's, is the checkout's: each runs with ``PYTHONPATH`` set to it, and
so do the node processes it starts. Checkouts alternate within a round, so a machine that
drifts drifts for all of them. The medians over the rounds are printed, one column a checkout.

    .venv/bin/python bench/hot_paths.py --checkout /tmp/before --checkout . [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: (figure, unit, lower is better)
FIGURES = (
    ("put node CPU", "µs", True),
    ("put median", "ms", True),
    ("append node CPU", "µs", True),
    ("append median", "ms", True),
    ("block of 1 node CPU", "µs", True),
    ("block of 8 node CPU", "µs", True),
    ("block of 100 node CPU", "µs", True),
    ("blocking write_event", "events/s", False),
)


def _run(checkout: Path, script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, str(HERE / script), *args],
        cwd=checkout, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{script} on {checkout} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def one_round(checkout: Path, requests: int, seconds: float) -> dict[str, float]:
    found: dict[str, float] = {}
    small = json.loads(_run(checkout, "small_requests.py", "--requests", str(requests),
                            "--rounds", "1"))["median"]  # fmt: skip
    found["put node CPU"] = small["put"]["server_cpu_us"]
    found["put median"] = small["put"]["median_ms"]
    found["append node CPU"] = small["append"]["server_cpu_us"]
    found["append median"] = small["append"]["median_ms"]
    blocks = _run(checkout, "server_blocks.py", "--seconds", str(seconds))
    for line in blocks.splitlines():
        cells = line.split()
        if len(cells) == 5 and cells[0].isdigit():
            found[f"block of {cells[0]} node CPU"] = float(cells[4])
    blocking = json.loads(_run(checkout, "sdk_client.py", "--only", "blocking", "--repeat", "1",
                               "--json"))["blocking"]  # fmt: skip
    found["blocking write_event"] = float(blocking["medians"]["write"])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", action="append", type=Path, default=[])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=4.0, help="per server_blocks case")
    args = parser.parse_args()
    checkouts = [c.resolve() for c in args.checkout] or [HERE.parent]
    runs: dict[Path, list[dict[str, float]]] = {c: [] for c in checkouts}
    for round_ in range(args.rounds):
        for checkout in checkouts:
            runs[checkout].append(one_round(checkout, args.requests, args.seconds))
            print(f"round {round_ + 1} {checkout}: {runs[checkout][-1]}", file=sys.stderr)
    names = [_label(c) for c in checkouts]
    print(f"{'figure':<28}" + "".join(f"{n:>22}" for n in names))
    for figure, unit, _lower in FIGURES:
        cells = []
        for checkout in checkouts:
            values = [r[figure] for r in runs[checkout] if figure in r]
            cells.append(f"{statistics.median(values):,.1f} {unit}" if values else "-")
        print(f"{figure:<28}" + "".join(f"{cell:>22}" for cell in cells))
    print(json.dumps({_label(c): runs[c] for c in checkouts}), file=sys.stderr)
    return 0


def _label(checkout: Path) -> str:
    """The checkout's commit (short), or its path when it is not a git tree."""
    try:
        git = ["git", "-C", str(checkout)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return checkout.name
    dirty = subprocess.run([*git, "status", "--porcelain", "-uno"], capture_output=True,
                           text=True, check=False).stdout  # fmt: skip
    return head + ("+" if re.search(r"\S", dirty) else "")


if __name__ == "__main__":
    sys.exit(main())
