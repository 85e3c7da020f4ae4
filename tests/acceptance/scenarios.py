"""Crash scenarios shared by the tests: run the workload while nodes are killed and restarted.

Responsibility: the loops of the crash and power-loss tests (``crash_loop``), with every random
choice (kill moments, kills during recovery, what a power loss keeps) drawn from one seed. The
tests decide what the reports must say: all clean with the protections on, a failure found
with one switched off.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.acceptance.nodes import NodeFactory, NodeProcess
from tests.acceptance.workload import CheckReport, Workload, check

__all__ = ["CrashRun", "assert_clean", "crash_loop"]

#: Seconds the workload runs before a kill, at least and at most.
RUN_SECONDS = (0.05, 0.6)
#: Share of kills that also kill the next node while it recovers, before it listens.
RECOVERY_KILL_SHARE = 0.2
#: Seconds after the start of a node at which such a kill lands, at most.
RECOVERY_KILL_SECONDS = 0.6


@dataclasses.dataclass
class CrashRun:
    """What a crash loop did and what the checker said after each restart."""

    kills: int = 0
    recovery_kills: int = 0
    reports: list[CheckReport] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def first_failure(self) -> CheckReport | None:
        return next((report for report in self.reports if not report.ok), None)


async def crash_loop(
    nodes: NodeFactory,
    data_dir: Path,
    workload: Workload,
    *,
    seed: int,
    kills: int,
    unsafe: str = "",
    tier1: str = "",
    tier1_options: str = "",
    after_kill: Callable[[random.Random], Awaitable[None]] | None = None,
    stop_at_first_failure: bool = False,
) -> CrashRun:
    """Run ``workload``, SIGKILL the node at a random moment, (``after_kill``), restart, check;
    ``kills`` times (plus kills during recovery), then check once more after a clean restart."""
    rng = random.Random(f"{seed}:crash-loop")
    run = CrashRun()
    began = time.monotonic()
    options = {"unsafe": unsafe, "tier1": tier1, "tier1_options": tier1_options}
    node = await nodes.start(data_dir, **options)
    await workload.create_segments(node.port)
    while run.kills < kills:
        stop = asyncio.Event()
        writing = asyncio.ensure_future(workload.run(node.port, stop))
        await asyncio.sleep(rng.uniform(*RUN_SECONDS))
        await node.kill()
        run.kills += 1
        await asyncio.wait_for(writing, workload.timeout * 2)
        if after_kill is not None:
            await after_kill(rng)
        if rng.random() < RECOVERY_KILL_SHARE:
            await _kill_during_recovery(nodes, data_dir, rng, options)
            run.recovery_kills += 1
        node = await nodes.start(data_dir, **options)
        run.reports.append(await check(node.port, workload))
        if stop_at_first_failure and not run.reports[-1].ok:
            break
    await node.terminate()
    node = await nodes.start(data_dir, **options)
    run.reports.append(await check(node.port, workload))
    await node.terminate()
    run.seconds = time.monotonic() - began
    return run


def assert_clean(run: CrashRun, workload: Workload, *, kills: int, acked_at_least: int) -> None:
    """The loop did its kills, wrote enough between them, and every check came out clean:
    nothing acknowledged lost, nothing twice, no writer's order broken."""
    assert run.kills >= kills
    failure = run.first_failure()
    assert failure is None, failure.summary()
    assert not workload.errors, workload.errors
    assert not workload.ledger.anomalies, workload.ledger.anomalies
    assert workload.ledger.acked_count() > acked_at_least  # it wrote between the kills


async def _kill_during_recovery(
    nodes: NodeFactory, data_dir: Path, rng: random.Random, options: dict[str, str]
) -> NodeProcess:
    node = await nodes.spawn(data_dir, **options)  # type: ignore[arg-type]
    await asyncio.sleep(rng.uniform(0.0, RECOVERY_KILL_SECONDS))
    await node.kill()
    return node
