"""Guarantees 1, 3, 4: acknowledged appends survive ``kill -9`` at random moments, retries of
idempotent writers never duplicate, and what is read back is exactly what was written.

Real ``millrace segmentstore`` processes (file tier-1, filesystem tier-2) are SIGKILLed while
idempotent writers append over the wire protocol; after every restart the checker reads all
segments back. With ``MILLRACE_TEST_UNSAFE=no-dedup`` the same loop must find duplicates: the
writers' re-sends are only harmless because the server deduplicates them.
"""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.nodes import NodeFactory
from tests.acceptance.scenarios import assert_clean, crash_loop
from tests.acceptance.workload import Workload

SEED = 20261121
KILLS = 20


async def test_acknowledged_appends_survive_kill_9(nodes: NodeFactory, tmp_path: Path) -> None:
    workload = Workload(SEED, name="crash")
    run = await crash_loop(nodes, tmp_path / "data", workload, seed=SEED, kills=KILLS)
    assert_clean(run, workload, kills=KILLS, acked_at_least=1000)
    assert workload.stats.duplicates_dropped > 0  # re-sends did reach the deduplication
    print(
        f"{run.kills} kills (+{run.recovery_kills} during recovery), "
        f"{workload.ledger.acked_count()} events acknowledged, {workload.stats}, "
        f"{run.seconds:.1f} s"
    )


async def test_without_dedup_the_checker_finds_duplicates(
    nodes: NodeFactory, tmp_path: Path
) -> None:
    """Protection off: re-sent events are stored again, and the checker must say so."""
    workload = Workload(SEED + 1, name="nodedup")
    run = await crash_loop(
        nodes,
        tmp_path / "data",
        workload,
        seed=SEED + 1,
        kills=4,
        unsafe="no-dedup",
        stop_at_first_failure=True,
    )
    failure = run.first_failure()
    assert failure is not None and failure.duplicates, "no-dedup went unnoticed"
