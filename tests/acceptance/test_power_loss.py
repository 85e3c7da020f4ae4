"""Guarantee 1 under power loss: after ``kill -9`` every tier-1 ledger is cut back to what was
fdatasynced, with a torn record at its end (``tests/acceptance/disk.py``); nothing acknowledged
may be missing after the restart.

With ``MILLRACE_TEST_UNSAFE=no-fsync`` nothing is synced, so the same cut must lose
acknowledged events and the checker must report them missing.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tests.acceptance.disk import power_loss
from tests.acceptance.nodes import NodeFactory
from tests.acceptance.scenarios import assert_clean, crash_loop
from tests.acceptance.workload import Workload, check

SEED = 20261122
KILLS = 20
SYNC_TRACE = json.dumps({"sync_trace": True})


async def test_acknowledged_appends_survive_power_loss(nodes: NodeFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    workload = Workload(SEED, name="powerloss")
    dropped = []

    async def lose_power(rng: random.Random) -> None:
        dropped.append(power_loss(data_dir, rng).bytes_dropped)

    run = await crash_loop(
        nodes,
        data_dir,
        workload,
        seed=SEED,
        kills=KILLS,
        tier1_options=SYNC_TRACE,
        after_kill=lose_power,
    )
    assert_clean(run, workload, kills=KILLS, acked_at_least=1000)
    print(
        f"{run.kills} power losses, {sum(dropped)} unsynced bytes dropped, "
        f"{workload.ledger.acked_count()} events acknowledged, {run.seconds:.1f} s"
    )


async def test_without_fsync_power_loss_loses_acknowledged_appends(
    nodes: NodeFactory, tmp_path: Path
) -> None:
    """Protection off: the same cut must lose acknowledged events, and the checker must say so."""
    data_dir = tmp_path / "data"
    workload = Workload(SEED + 1, name="nofsync")
    options = {"unsafe": "no-fsync", "tier1_options": SYNC_TRACE}
    node = await nodes.start(data_dir, **options)
    await workload.create_segments(node.port)
    await workload.run_for(node.port, 1.0)
    assert workload.ledger.acked_count() > 200
    await node.kill()
    power_loss(data_dir, random.Random(SEED))
    node = await nodes.start(data_dir, **options)
    report = await check(node.port, workload)
    assert report.missing, f"no-fsync went unnoticed: {report.summary()}"
    assert "UNSAFE TEST MODE" in node.stderr()
