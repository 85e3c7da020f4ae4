"""A real Prometheus (Debian's ``prometheus``, started by the test on a loopback port) scrapes
a ``millrace standalone`` node with the configuration ``millrace scrape-config`` prints and
evaluates the shipped alert rules (``deploy/prometheus/millrace-alerts.yml``). The test asks
Prometheus's HTTP API, as an operator's tools and Grafana do:

* every process of the node is a target and up;
* every panel's expression of the shipped Grafana dashboards (``deploy/grafana/``) returns data;
* the alerts fire for real and resolve afterwards: a reader group that stalls (its reader
  syncs but does not read while data arrives) and reads again; a data disk filled near its
  limit (a file of the test's on a small loop-mounted filesystem holding the data directory)
  and freed; a segment store that stops answering (SIGSTOP, the supervisor's liveness restart
  switched off) and so fails the canary too, then goes on (SIGCONT);
* a three-node cluster (``tests.acceptance.cluster``, on a PostgreSQL of the test's own):
  every controller, node, worker and beat found and up, and ``millrace doctor`` finds all OK;
  a node SIGKILLed fires ``MillraceProcessDown`` naming it and ``MillraceFailover`` (and the
  doctor names it); started again, it resolves.

The rules' waits (``for:``) and the canary's threshold are shortened to the test's periods
(a 1 s scrape and evaluation, a 2 s canary); the expressions are the shipped ones.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.cluster import LocalCluster
from tests.acceptance.postgres import PrivatePostgres
from tests.acceptance.standalone_node import (
    Standalone,
    eventually,
    free_ports,
    running_standalone,
)
from tests.acceptance.test_full_disk import _fill, small_disk  # noqa: F401 - a fixture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DEPLOY = Path(__file__).parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "millrace-alerts.yml"
CANARY_PERIOD_S = 2


@pytest.fixture
def node(small_disk: Path) -> Iterator[Standalone]:  # noqa: F811 - the fixture
    env = {
        "MILLRACE_CANARY_PERIOD_S": str(CANARY_PERIOD_S), "MILLRACE_LAG_PERIOD_S": "1",
        "MILLRACE_TEST_UNSAFE": "no-liveness-restart",
    }  # fmt: skip
    yield from running_standalone(small_disk, "prometheus", env)


def _short_rules(to: Path) -> Path:
    """The shipped rules with the test's waits: ``for:`` 2 s, the canary's 3 periods."""
    text = re.sub(r"for: \d+m", "for: 2s", RULES.read_text())
    text = text.replace("> 3 * 30", f"> 3 * {CANARY_PERIOD_S}")
    to.write_text(text)
    return to


def running_prometheus(url: str, env: dict[str, str], where: Path) -> Iterator[str]:
    """Debian's prometheus with the configuration ``millrace scrape-config`` prints for the
    node or cluster at ``url`` (run with ``env``: its data directory or token secret), the
    shortened rules and a 1 s scrape; its API's URL (a fixture's body)."""
    if shutil.which("prometheus") is None:
        pytest.skip("Debian's prometheus is not installed (scripts/dev.sh test installs it)")
    printed = subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", "scrape-config", "--url", url,
         "--interval", "1s", "--rules", str(_short_rules(where / "rules.yml")),
         "--token-file", str(where / "token")],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    config = where / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 1s}\n" + printed
    )
    subprocess.run(["promtool", "check", "config", str(config)], check=True, capture_output=True)
    (port,) = free_ports(1)
    with open(where / "prometheus.log", "wb") as log:
        process = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={where / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(30)


@pytest.fixture
def prometheus(node: Standalone, tmp_path: Path) -> Iterator[str]:
    yield from running_prometheus(node.base, node.operator_env(), tmp_path)


def api(prometheus: str, path: str, **params: str) -> Any:
    url = f"{prometheus}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())["data"]
    except OSError:
        return None  # not listening yet


def all_up(prometheus: str, wanted: dict[str, int]) -> bool:
    """Prometheus has ``wanted[role]`` targets of each role, every one up."""
    found = (api(prometheus, "query", query='up{job="millrace"}') or {}).get("result", [])
    roles: dict[str, int] = {}
    for each in found:
        if each["value"][1] != "1":
            return False
        roles[each["metric"]["role"]] = roles.get(each["metric"]["role"], 0) + 1
    return roles == wanted


def firing(prometheus: str) -> dict[str, list[dict[str, str]]]:
    """The alerts firing now, by name, with their labels."""
    found: dict[str, list[dict[str, str]]] = {}
    for alert in (api(prometheus, "alerts") or {}).get("alerts", []):
        if alert["state"] == "firing":
            found.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
    return found


def _stall(node: Standalone, prometheus: str) -> None:
    scope = f"prom{uuid.uuid4().hex[:8]}"
    with StreamManager(node.base, token=node.token) as manager:
        manager.create_scope(scope)
        manager.create_stream(scope, "st", 1)
        group = manager.create_reader_group(scope, "g", [f"{scope}/st"])
        reader = group.create_reader("r1")
        with manager.create_writer(scope, "st") as writer:

            def stalled() -> bool:
                writer.write_event(b"x" * 100, routing_key="k")  # data arriving, none read
                writer.flush()
                names = firing(prometheus).get("MillraceReaderGroupStalled", [])
                return any(labels["scope"] == scope for labels in names)

            eventually(stalled, 120, "MillraceReaderGroupStalled firing", every=0.5)

        def resolved() -> bool:
            reader.read_batch(1000, timeout=1)
            names = firing(prometheus).get("MillraceReaderGroupStalled", [])
            return not any(labels["scope"] == scope for labels in names)

        eventually(resolved, 120, "MillraceReaderGroupStalled resolved", every=0.5)
        reader.close()


def _every_panel_has_data(prometheus: str) -> None:
    """Each expression of each shipped Grafana dashboard, asked of Prometheus, has a result."""
    exprs = [
        (board.name, panel["title"], target["expr"])
        for board in sorted((DEPLOY / "grafana").glob("*.json"))
        for panel in json.loads(board.read_text())["panels"]
        for target in panel["targets"]
    ]
    assert len(exprs) >= 30
    for board, title, expr in exprs:
        eventually(
            lambda expr=expr: (api(prometheus, "query", query=expr) or {}).get("result"),
            60, f"data for {board}: {title}: {expr}", every=0.5,
        )  # fmt: skip


def test_prometheus_scrapes_every_process_and_the_alerts_fire_and_resolve(
    node: Standalone,
    prometheus: str,
    small_disk: Path,  # noqa: F811 - the fixture
) -> None:
    up = {"controller": 1, "segmentstore": 1, "worker": 1, "beat": 1}
    eventually(lambda: all_up(prometheus, up), 120, "every process of the node up", every=0.5)
    assert not firing(prometheus), firing(prometheus)

    _stall(node, prometheus)
    sealed = f"seal{uuid.uuid4().hex[:8]}"
    with StreamManager(node.base, token=node.token) as manager:  # a workflow task, counted
        manager.create_scope(sealed)
        manager.create_stream(sealed, "st", 1)
        manager.seal_stream(sealed, "st")
    _every_panel_has_data(prometheus)

    filler = _fill(small_disk, 0.92)  # within 5 points of the 95 % limit
    eventually(lambda: "MillraceDiskNearLimit" in firing(prometheus), 60,
               "MillraceDiskNearLimit firing", every=0.5)  # fmt: skip
    filler.unlink()
    eventually(lambda: "MillraceDiskNearLimit" not in firing(prometheus), 60,
               "MillraceDiskNearLimit resolved", every=0.5)  # fmt: skip

    store = node.pid_of("segmentstore")
    assert store is not None
    os.kill(store, signal.SIGSTOP)
    try:

        def down() -> bool:
            now = firing(prometheus)
            roles = {labels["role"] for labels in now.get("MillraceProcessDown", [])}
            return roles == {"segmentstore"} and "MillraceCanaryFailing" in now

        eventually(down, 90, "MillraceProcessDown and MillraceCanaryFailing firing", every=0.5)
    finally:
        os.kill(store, signal.SIGCONT)
    seen: list[Any] = []

    def resolved() -> bool:
        seen[:] = [firing(prometheus)]
        return not {"MillraceProcessDown", "MillraceCanaryFailing"} & seen[0].keys()

    try:
        eventually(resolved, 120, "MillraceProcessDown and MillraceCanaryFailing resolved")
    finally:
        print("firing at the end:", seen)


@pytest.fixture
def cluster(postgres: PrivatePostgres, tmp_path: Path) -> Iterator[LocalCluster]:
    environ = {"MILLRACE_CANARY_PERIOD_S": str(CANARY_PERIOD_S)}
    cluster = LocalCluster(tmp_path / "cluster", postgres.url, environ=environ)
    for i, port in enumerate(free_ports(3)):  # (the cluster's default: no metrics port)
        cluster.node_env[i] = {"MILLRACE_SEGMENTSTORE_METRICS_PORT": str(port)}
    yield from cluster.running()


def _doctor(cluster: LocalCluster) -> tuple[int, str]:
    """``millrace doctor`` as an operator runs it against the cluster's first controller."""
    done = subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", "doctor", "--url", cluster.base(0),
         "--token", cluster.token],
        env=cluster.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout


def test_prometheus_follows_a_three_node_cluster_through_a_sigkilled_node(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """Two controllers, three segment store nodes, a worker and two beats are found and up;
    a node SIGKILLed fires MillraceProcessDown naming it and MillraceFailover (its containers
    start on the others); started again, it is up again and the alert resolves."""
    where = tmp_path / "prometheus"
    where.mkdir()
    prometheus_runs = running_prometheus(cluster.base(0), cluster.env, where)
    prometheus = next(prometheus_runs)
    try:
        up = {"controller": 2, "segmentstore": 3, "worker": 1, "beat": 2}
        try:
            eventually(lambda: all_up(prometheus, up), 120, "every process up", every=0.5)
        except AssertionError:
            targets = (api(prometheus, "targets") or {}).get("activeTargets", [])
            seen = [(t["labels"], t["health"], t["lastError"]) for t in targets]
            raise AssertionError(f"not every process up: {seen}") from None
        code, said = _doctor(cluster)
        assert code == 0 and all(line.startswith("OK") for line in said.splitlines()), said
        for who in ("segmentstore node-0", "segmentstore node-1", "segmentstore node-2"):
            assert f"OK    process: {who}" in said, said
        cluster.processes["node-1"].signal(signal.SIGKILL)

        def down() -> bool:
            now = firing(prometheus)
            nodes = {labels.get("node") for labels in now.get("MillraceProcessDown", [])}
            return nodes == {"node-1"} and "MillraceFailover" in now

        eventually(down, 120, "MillraceProcessDown for node-1 and MillraceFailover", every=0.5)
        code, said = _doctor(cluster)
        assert code == 1 and "FAIL  process: segmentstore node-1 at" in said, said
        cluster.start_node(1)

        def back() -> bool:
            return "MillraceProcessDown" not in firing(prometheus) and all_up(prometheus, up)

        eventually(back, 180, "node-1 up again and MillraceProcessDown resolved", every=0.5)
    finally:
        prometheus_runs.close()
