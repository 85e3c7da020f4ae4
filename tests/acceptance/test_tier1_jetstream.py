"""Guarantees 1, 3 and 4 on ``MILLRACE_TIER1=jetstream``: segment store processes whose tier-1
is a three-server JetStream cluster (replicas 3, real nats-server processes on 127.0.0.1)
are SIGKILLed at random moments while idempotent writers append, and one JetStream server is
SIGKILLed mid-run; after every restart the crash checker reads every segment back: no
acknowledged append lost, none duplicated, each writer's order intact."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.acceptance.nodes import NodeFactory
from tests.acceptance.scenarios import assert_clean, crash_loop
from tests.acceptance.workload import Workload
from tests.tiers.nats_servers import nats_servers

pytestmark = pytest.mark.slow

SEED = 20261125
KILLS = 6


async def test_acknowledged_appends_survive_node_and_jetstream_server_kills(
    nodes: NodeFactory, tmp_path: Path
) -> None:
    with nats_servers(tmp_path / "nats", 3) as servers:
        options = json.dumps({"servers": [s.url for s in servers], "replicas": 3})
        workload = Workload(SEED, name="jetstream")

        async def kill_a_server_mid_run() -> None:  # once writes are being acknowledged
            while workload.ledger.acked_count() < 300:
                await asyncio.sleep(0.05)
            servers[1].kill()

        killer = asyncio.ensure_future(kill_a_server_mid_run())
        run = await crash_loop(nodes, tmp_path / "data", workload, seed=SEED, kills=KILLS,
                               tier1="jetstream", tier1_options=options)  # fmt: skip
        assert killer.done()  # (before the loop ended)
        assert servers[1].process is not None and servers[1].process.returncode == -9
    assert_clean(run, workload, kills=KILLS, acked_at_least=500)
    print(
        f"{run.kills} kills, one JetStream server of three killed, "
        f"{workload.ledger.acked_count()} events acknowledged, {workload.stats}, "
        f"{run.seconds:.1f} s"
    )
