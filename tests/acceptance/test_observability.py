"""Each process of a ``millrace standalone`` node answers for itself, as an orchestrator's
probes and Prometheus call it (no cookie; no credential for the probes, a bearer token for
the metrics):

* the controller's ``/live`` and ``/ready``; ``/v1/metrics/targets`` (Prometheus's HTTP
  service discovery) lists the controller, the segment store, the worker and beat, each with
  a port that answers ``/live``, ``/ready`` and ``/metrics``;
* one credential, the token ``millrace scrape-config`` writes, reads every port;
* the canary writes to and reads from the node every 2 s, and the controller exports it;
* ``millrace doctor`` finds all well, then names each fault: a host clock moved (its test
  hook), the segment store stopped (SIGSTOP), a reader group without readers."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import Standalone, eventually, running_standalone

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    env = {"MILLRACE_CANARY_PERIOD_S": "2", "MILLRACE_LAG_PERIOD_S": "1"}
    yield from running_standalone(tmp_path_factory, "observe", env)


def get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def scrape_token(node: Standalone, tmp: Path) -> str:
    """What ``millrace scrape-config`` writes (and its configuration names)."""
    token_file = tmp / "prometheus-token"
    config = node.cli("scrape-config", "--url", node.base, "--token-file", str(token_file)).stdout
    assert f'"{node.base}/v1/metrics/targets"' in config and str(token_file) in config
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    return token_file.read_text().strip()


def targets(node: Standalone, token: str) -> list[dict[str, Any]]:
    status, body = get(f"{node.base}/v1/metrics/targets", token)
    assert status == 200, body
    return list(json.loads(body))


def test_every_process_answers_its_own_probes_and_metrics(node: Standalone, tmp_path: Path) -> None:
    assert json.loads(get(f"{node.base}/live")[1]) == {"live": True, "reason": "answering"}
    status, body = get(f"{node.base}/ready")
    assert status == 200 and json.loads(body)["ready"] is True, body
    token = scrape_token(node, tmp_path)
    found = eventually(
        lambda: {g["labels"]["role"]: g for g in targets(node, token)}.keys()
        >= {"controller", "segmentstore", "worker", "beat"} and targets(node, token),
        60, "every role among the targets",
    )  # fmt: skip
    wanted = {
        "controller": "millrace_streams",
        "segmentstore": "millrace_append_ack_latency_seconds",
        "worker": "millrace_worker_broker_connected 1.0",
        "beat": "millrace_beat_heartbeat_age_seconds",
    }
    for group in found:
        role, (address,) = group["labels"]["role"], group["targets"]
        base = f"{group['labels']['__scheme__']}://{address}"
        ready_status, ready = get(f"{base}/ready")
        assert ready_status == 200 and json.loads(ready)["ready"] is True, (role, ready)
        assert get(f"{base}/live")[0] == 200, role
        assert get(f"{base}/metrics")[0] == 401, role  # the metrics need the token
        status, text = get(f"{base}/metrics", token)
        assert status == 200 and wanted[role] in text.decode(), (role, text[:300])
        assert "process_cpu_seconds_total" in text.decode() or role == "controller"
    assert get(f"{node.base}/v1/metrics/targets", "not.a.token")[0] == 401


def test_the_canary_writes_to_and_reads_from_the_node(node: Standalone, tmp_path: Path) -> None:
    token = scrape_token(node, tmp_path)

    def canary() -> str | None:
        text = get(f"{node.base}/metrics", token)[1].decode()
        lines = [line for line in text.splitlines() if line.startswith("millrace_canary_")]
        ok = [line for line in lines if line.startswith("millrace_canary_successes_total")]
        return "\n".join(lines) if ok and float(ok[0].split()[-1]) >= 2 else None

    lines = eventually(canary, 60, "two canary rounds")
    read = next(line for line in lines.splitlines() if line.startswith("millrace_canary_read"))
    assert 0 < float(read.split()[-1]) < 5, lines
    assert "millrace_canary_failures_total" in lines


def doctor(node: Standalone, **env: str) -> tuple[int, str]:
    """``millrace doctor`` as an operator runs it on the node's host."""
    done = node.cli("doctor", "--url", node.base, check=False, **env)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout


def test_the_doctor_finds_all_well_then_names_each_fault(node: Standalone) -> None:
    code, said = doctor(node)
    assert code == 0 and all(line.startswith("OK") for line in said.splitlines()), said
    parts = ["database:", "clock:", "broker:", "certificate:", "token secret:", "versions:",
             "process: segmentstore", "process: worker", "process: beat"]  # fmt: skip
    assert [part for part in parts if part not in said] == [], said

    # a host clock moved
    code, said = doctor(node, MILLRACE_TEST_CLOCK_OFFSET_S="120")
    assert code == 1 and "FAIL  clock: this host's clock is 120" in said, said

    # the segment store stops answering (SIGSTOP; the supervisor waits 15 s before it acts)
    store = node.pid_of("segmentstore")
    assert store is not None
    os.kill(store, signal.SIGSTOP)
    try:
        code, said = doctor(node)
    finally:
        os.kill(store, signal.SIGCONT)
    assert code == 1 and "FAIL  segmentstore: DOWN" in said, said
    assert "FAIL  process: segmentstore standalone" in said and "does not answer" in said, said

    # a reader group whose reader left: STOP
    scope = f"doc{uuid.uuid4().hex[:8]}"
    with StreamManager(node.base, token=node.token) as manager:
        manager.create_scope(scope)
        manager.create_stream(scope, "st", 1)
        group = manager.create_reader_group(scope, "g", [f"{scope}/st"])
        group.create_reader("r1").close()
    eventually(
        lambda: f"WARN  reader group: {scope}/g is STOP" in doctor(node)[1], 60,
        "the doctor naming the stopped group",
    )  # fmt: skip
