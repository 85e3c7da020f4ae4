"""Summarise a ``py-spy record --format raw`` profile: where a process spends its time.

Usage::

    .venv/bin/python bench/profile_summary.py PROFILE.txt [--top 25] [--thread MainThread]

Prints, for the samples of the chosen thread(s), the functions with the most *self* time (the
frame on top of the stack) and the most *inclusive* time (anywhere on the stack), as a share of
the samples. ``append_throughput.py --profile py-spy`` writes such files (one per Millrace run).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

_LOCATION = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _name(frame: str) -> str:
    """``func (path/to/module.py:123)`` -> ``func (module.py)`` (lines merged)."""
    match = _LOCATION.match(frame.strip())
    if not match:
        return frame.strip()
    file = match["file"]
    short = "/".join(file.split("/")[-2:]) if "/" in file else file
    return f"{match['func']} ({short})"


def summarise(path: Path, thread: str | None) -> tuple[int, collections.Counter[str], ...]:
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        head = frames[0]
        threads[head] += count
        if thread and thread not in head:
            continue
        names = [_name(f) for f in frames[1:] if f.strip()]
        if not names:
            continue
        samples += count
        own[names[-1]] += count
        for name in set(names):
            total[name] += count
    return samples, own, total, threads


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("profile", type=Path)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--thread", help="only stacks whose thread label contains this")
    args = p.parse_args(argv)
    samples, own, total, threads = summarise(args.profile, args.thread)
    if not samples:
        print("no samples", file=sys.stderr)
        return 1
    print(f"{samples} samples; by thread:")
    for name, n in threads.most_common(8):
        print(f"  {n:>8}  {name}")
    for title, counter in (("self", own), ("inclusive", total)):
        print(f"\ntop {args.top} by {title} time:")
        for name, n in counter.most_common(args.top):
            print(f"  {100 * n / samples:6.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
