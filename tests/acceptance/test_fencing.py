"""Guarantee 5: a fenced (older epoch) container instance can no longer change either tier.

Node A runs on a data directory; it is stopped (SIGSTOP) while idle, node B starts on the same
directory and takes every container over with the next epoch, writers go on through B; B is
stopped, A continues (SIGCONT) and writers try to append through it. A must refuse every append
and leave every byte of both tiers that anyone reads as it was; what B serves must be exactly
the acknowledged events, and still so after A and B are gone and a third node C recovers.

With ``MILLRACE_TEST_UNSAFE=no-fencing`` (tier-1 skips its epoch check after a write) A goes on
acknowledging appends nobody will ever read, and the checker must find them missing.
"""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path

from tests.acceptance.disk import changes, snapshot
from tests.acceptance.nodes import NodeFactory
from tests.acceptance.workload import CheckReport, Workload, check

SEED = 20261124
#: Writers 0-3 write through the live node, 4-6 through the fenced one.
WRITER_SEGMENTS = (0, 0, 1, 2, 0, 1, 2)
LIVE, STALE = slice(0, 4), slice(4, 7)
#: Long enough for A's storage writer to try to flush to tier-2 after it continues.
STALE_SECONDS = 1.5


@dataclasses.dataclass
class TakeOver:
    """What ``take_over`` saw: the checker's reports from B and from a later node C, and what
    changed in the tiers while only the fenced node A ran."""

    from_second: CheckReport
    from_third: CheckReport
    changed: list[str]
    added: list[str]


async def take_over(
    nodes: NodeFactory, data_dir: Path, workload: Workload, unsafe: str = ""
) -> TakeOver:
    """A writes and is stopped; B takes over and writes, and is stopped; A continues and is
    written to; then B continues and is checked, and so is C after A and B are gone."""
    live, stale = workload.writers[LIVE], workload.writers[STALE]
    first = await nodes.start(data_dir, unsafe=unsafe)
    await workload.create_segments(first.port)
    await workload.run_for(first.port, 0.5, live)
    first.signal(signal.SIGSTOP)
    second = await nodes.start(data_dir, unsafe=unsafe)
    await workload.run_for(second.port, 0.5, live)
    second.signal(signal.SIGSTOP)  # from here on only A can change the tiers
    before = snapshot(data_dir)
    first.signal(signal.SIGCONT)
    await workload.run_for(first.port, STALE_SECONDS, stale)
    await first.kill()
    changed, added = changes(data_dir, before)
    second.signal(signal.SIGCONT)
    await workload.run_for(second.port, 0.3, live)
    from_second = await check(second.port, workload, exact=True)
    await second.terminate()
    third = await nodes.start(data_dir)
    from_third = await check(third.port, workload, exact=True)
    await third.terminate()
    return TakeOver(from_second, from_third, changed, added)


async def test_fenced_node_can_no_longer_acknowledge_or_change_the_tiers(
    nodes: NodeFactory, tmp_path: Path
) -> None:
    workload = Workload(SEED, name="fencing", writer_segments=WRITER_SEGMENTS)
    result = await take_over(nodes, tmp_path / "data", workload)
    stale = range(STALE.start, STALE.stop)
    assert all(not workload.ledger.acked[w] for w in stale), "the fenced node acknowledged"
    assert any(f"writer {w}" in error for error in workload.errors for w in stale)
    assert not any(f"writer {w}" in error for error in workload.errors for w in range(4))
    assert not result.changed, result.changed
    # A's storage writer asks tier-1 before each tier-2 change, so A adds no chunk at all.
    assert not result.added, result.added
    assert result.from_second.ok, result.from_second.summary()
    assert result.from_third.ok, result.from_third.summary()
    assert workload.ledger.acked_count() > 500


async def test_without_fencing_the_checker_finds_lost_acknowledged_appends(
    nodes: NodeFactory, tmp_path: Path
) -> None:
    """Protection off: the fenced node acknowledges, and the checker must catch it."""
    workload = Workload(SEED + 1, name="nofencing", writer_segments=WRITER_SEGMENTS)
    result = await take_over(nodes, tmp_path / "data", workload, unsafe="no-fencing")
    assert any(workload.ledger.acked[w] for w in range(STALE.start, STALE.stop))
    stale_missing = [(w, n) for w, n in result.from_second.missing if w >= STALE.start]
    assert stale_missing, f"no-fencing went unnoticed: {result.from_second.summary()}"
