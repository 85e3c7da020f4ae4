"""Smoke test of ``bench/append_throughput.py``: a few seconds of ``--quick``; it must print
figures for every scenario (no speed is asserted: this machine's speed is not the test's
business) and leave no process or temporary directory behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "append_throughput.py"

pytestmark = pytest.mark.slow


def test_quick_run_prints_figures(tmp_path: Path) -> None:
    cmd = [
        sys.executable, str(BENCH), "--quick", "--duration", "0.5", "--warmup", "0.3",
        "--many-segments", "20", "--json", "--no-progress", "--tmp-dir", str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    medians = report["medians"]
    expected = {"millrace-100B", "millrace-10KiB", "millrace-paced-100k", "millrace-10-segments",
                "millrace-20-segments"}  # fmt: skip
    assert expected <= set(medians)
    for name, figures in medians.items():
        assert figures["events_per_s"] > 0, name
        assert figures["latency_p99_ms"] >= figures["latency_p50_ms"] > 0, name
    assert "events/s" in done.stderr and "Millrace" in done.stderr  # the table
    assert [t["target"] for t in report["targets"]]  # every target gets a verdict
    assert list(tmp_path.iterdir()) == []  # temporary data directories removed


def test_server_blocks_prints_the_node_cost_per_block() -> None:
    """``bench/server_blocks.py`` (the node alone, pre-encoded frames): a one-second case
    prints its table row with blocks and events per second and CPU per block."""
    cmd = [sys.executable, str(BENCH.with_name("server_blocks.py")),
           "--writers", "10", "--events", "8", "--seconds", "1"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.strip().startswith("8 ")]
    assert len(rows) == 1, done.stdout
    blocks, events = (int(figure.replace(",", "")) for figure in rows[0][1:3])
    assert blocks > 0 and abs(events - 8 * blocks) <= 8  # (each figure rounded)


def test_client_append_many_prints_the_cost_per_event() -> None:
    """``bench/client_append_many.py`` (the client alone): a tiny run prints a figure per round,
    by handles and zips and by ids and lists; a bad count is refused."""
    script = BENCH.parent / "client_append_many.py"
    for extra in ([], ["--ids", "--lists"]):
        cmd = [sys.executable, str(script), "--writers", "50", "--steps", "20", "--sweep", "5",
               "--rounds", "2", *extra]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-3000:]
        figures = done.stdout.split(":")[-1].split()[:-1]
        assert len(figures) == 2 and all(float(f) > 0 for f in figures), done.stdout
    bad = subprocess.run([sys.executable, str(script), "--writers", "0"], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "at least 1" in bad.stderr
