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
from tests.acceptance.scenarios import crash_loop
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
        # One server of three dies with SIGKILL while the workload writes.
        asyncio.get_running_loop().call_later(2.0, servers[1].kill)
        run = await crash_loop(nodes, tmp_path / "data", workload, seed=SEED, kills=KILLS,
                               tier1="jetstream", tier1_options=options)  # fmt: skip
        assert servers[1].process is not None and servers[1].process.returncode == -9
    assert run.kills >= KILLS
    failure = run.first_failure()
    assert failure is None, failure.summary()
    assert not workload.errors, workload.errors
    assert not workload.ledger.anomalies, workload.ledger.anomalies
    assert workload.ledger.acked_count() > 500
    print(
        f"{run.kills} kills, one JetStream server of three killed, "
        f"{workload.ledger.acked_count()} events acknowledged, {workload.stats}, "
        f"{run.seconds:.1f} s"
    )
