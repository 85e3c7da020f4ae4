"""Health endpoints: Pravega's HealthResult shape, no authentication, a contributor per part.

Through Django's test client against real parts: a real segment store process registered as
the node (``registered_node``), a real Celery worker (``live_worker``) whose own heartbeat
thread reports it, the filesystem or Redis broker, the test database. A segment store that is
stopped (SIGSTOP) or gone, a stale or missing heartbeat and a failing tier-2 are each reported
down by name; with the test-only switch ``no-health-contributors`` (the old health check that
asked only the database) the same checks must fail.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError
from django.test import Client
from django.utils import timezone

from controller_app.models import ProcessHeartbeat
from controller_app.operations import health, heartbeats
from millrace.kernel import status_files
from millrace.kernel.status_files import node_status_path
from segment_app.engine.bootstrap import StoreSettings, build_segment_store
from segment_app.engine.config import ContainerConfig, SegmentStoreConfig, StorageWriterConfig
from tiers.memory.faults import FaultInjector

pytestmark = pytest.mark.django_db(transaction=True)

HEALTH_FIELDS = {"name", "status", "readiness", "liveness", "details", "children"}
CONTRIBUTORS = {"database", "segmentstore", "tiers", "worker", "beat", "broker"}


@pytest.fixture
def beating() -> None:
    """Worker and beat heartbeats recorded now (as their processes do every 2 s)."""
    heartbeats.record("worker")
    heartbeats.record("beat")


@pytest.fixture
def healthy(registered_node: Any, beating: None) -> Any:
    return registered_node


@pytest.fixture
def stopped_node(healthy: Any) -> Iterator[Any]:
    """The segment store process stopped with SIGSTOP (hung), continued afterwards."""
    os.kill(healthy.process.pid, signal.SIGSTOP)
    try:
        yield healthy
    finally:
        os.kill(healthy.process.pid, signal.SIGCONT)


@pytest.fixture
def blind(settings: Any) -> None:
    """TEST-ONLY: the health check without its contributors (it asked only the database)."""
    flags = settings.MILLRACE.unsafe | {"no-health-contributors"}
    settings.MILLRACE = dataclasses.replace(settings.MILLRACE, unsafe=flags)


@pytest.fixture
def database_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every new cursor on the default database fails, as when the server is unreachable."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise OperationalError("connection refused")

    from django.db import connections

    # On the class: the health check runs in a thread of its own, with its own connection.
    monkeypatch.setattr(type(connections["default"]), "cursor", refuse)


def assert_down(client: Client, contributor: str, why: str, writes_stop: bool) -> dict[str, Any]:
    """The node says DOWN (503) naming ``contributor``, whose details contain ``why``."""
    response = client.get("/health")
    body = response.json()
    assert (response.status_code, body["status"]) == (503, "DOWN"), body
    assert contributor in body["details"]["down"]
    part = body["children"][contributor]
    assert part["status"] == "DOWN"
    assert why in str(part["details"]), part
    readiness = client.get("/health/readiness")
    assert (readiness.status_code, readiness.json()) == (
        (503, False) if writes_stop else (200, True)
    )
    return body


def test_every_part_up(client: Client, healthy: Any) -> None:
    response = client.get("/health")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert set(body) == HEALTH_FIELDS
    assert (body["name"], body["status"], body["readiness"], body["liveness"]) == (
        "millrace", "UP", True, True,
    )  # fmt: skip
    assert set(body["children"]) == CONTRIBUTORS
    assert body["children"]["database"]["details"]["vendor"] in ("sqlite", "postgresql")
    store = body["children"]["segmentstore"]
    assert store["details"][f"127.0.0.1:{healthy.port}"] == "answers"
    assert body["children"]["broker"]["status"] == "UP"
    assert "s ago" in body["children"]["worker"]["details"]["lastHeartbeat"]
    # A segment store on another host (here: another data directory) sends no report: the
    # tiers are unknown, which does not make the node down.
    assert body["children"]["tiers"]["status"] == "UNKNOWN"


def test_a_real_worker_reports_itself(client: Client, live_worker: Any) -> None:
    """The worker's own heartbeat thread (started by Celery's worker_ready) keeps it UP."""
    ProcessHeartbeat.objects.all().delete()
    deadline = time.monotonic() + 10
    while client.get("/health/status/worker").json() != "UP":
        assert time.monotonic() < deadline, client.get("/health/worker").json()
        time.sleep(0.2)
    detail = client.get("/health/details/worker").json()["lastHeartbeat"]
    assert str(live_worker.process.pid) in detail


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/health/readiness", True),
        ("/health/liveness", True),
        ("/health/status", "UP"),
        ("/health/details", {}),
        ("/health/readiness/database", True),
        ("/health/liveness/segmentstore", True),
        ("/health/status/worker", "UP"),
        ("/v1/health/status/beat", "UP"),
    ],
)
def test_health_aspects(client: Client, healthy: Any, path: str, expected: object) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.json() == expected


def test_a_hung_segment_store_is_down_within_the_timeout(client: Client, stopped_node: Any) -> None:
    started = time.monotonic()
    body = assert_down(client, "segmentstore", "no answer", writes_stop=True)
    assert time.monotonic() - started < 2 * (health.HEALTH_TIMEOUT_SECONDS + 1)
    assert body["children"]["segmentstore"]["readiness"] is False


def test_a_segment_store_that_is_gone_is_down(
    client: Client, beating: None, free_port: int
) -> None:
    from controller_app.cluster import membership

    membership.register_node(host="127.0.0.1", port=free_port, container_count=4)
    assert_down(client, "segmentstore", "refused", writes_stop=True)


def test_no_segment_store_registered_is_down(client: Client, beating: None) -> None:
    assert_down(client, "segmentstore", "no segment store node is registered", writes_stop=True)


def test_a_stale_worker_heartbeat_is_down_but_writes_go_on(client: Client, healthy: Any) -> None:
    past = timezone.now() - dt.timedelta(seconds=status_files.HEARTBEAT_STALE_SECONDS + 5)
    ProcessHeartbeat.objects.filter(role="worker").update(beat_at=past)
    assert_down(client, "worker", "s ago", writes_stop=False)


def test_beat_that_never_ticked_is_down(client: Client, healthy: Any) -> None:
    ProcessHeartbeat.objects.filter(role="beat").delete()
    assert_down(client, "beat", "never", writes_stop=False)


def test_database_down_is_named_alone_and_the_node_stays_ready(
    client: Client, healthy: Any, database_down: None, settings: Any
) -> None:
    """Running writers append without the database: it is DOWN, the node stays ready, and the
    segment store is found through its status file on this host (not the node registry)."""
    settings.MILLRACE = dataclasses.replace(settings.MILLRACE, data_dir=healthy.data_dir)
    body = assert_down(client, "database", "OperationalError", writes_stop=False)
    assert body["children"]["segmentstore"]["status"] == "UP", body["children"]["segmentstore"]
    assert body["liveness"] is True
    liveness = client.get("/health/liveness")
    assert (liveness.status_code, liveness.json()) == (200, True)
    assert client.get("/health/status").json() == "DOWN"


def test_without_contributors_the_checks_fail(
    client: Client, stopped_node: Any, blind: None
) -> None:
    """The guard switched off: a hung segment store and a dead worker go unnoticed."""
    ProcessHeartbeat.objects.all().delete()
    with pytest.raises(AssertionError):
        assert_down(client, "segmentstore", "no answer", writes_stop=True)
    assert client.get("/health").status_code == 200


def test_contributor_health(client: Client, healthy: Any) -> None:
    body = client.get("/health/database").json()
    assert (body["name"], body["status"], body["children"]) == ("database", "UP", {})


def test_unknown_contributor_is_404_json(client: Client, healthy: Any) -> None:
    response = client.get("/health/readiness/nosuch")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert "nosuch" in response.json()["message"] and "segmentstore" in response.json()["message"]


def test_health_needs_no_credentials_even_bad_ones(client: Client, healthy: Any) -> None:
    response = client.get("/health", HTTP_AUTHORIZATION="Basic bm9ib2R5Om5vdGhpbmc=")
    assert response.status_code == 200


def test_only_get_is_allowed(client: Client) -> None:
    assert client.post("/health/readiness").status_code == 405


# -- tiers: what the segment store itself reports -----------------------------------------------


async def test_a_failing_tier2_is_named_and_writes_go_on(tmp_path: Any) -> None:
    """A real store on memory tiers whose tier-2 writes fail: its report names tier-2 as down,
    tier-1 stays up, and the node stays ready (acknowledgements do not wait for tier-2)."""
    faults = FaultInjector()
    writer = StorageWriterConfig(flush_delay_ms=10, flush_bytes_min=1)
    settings = StoreSettings(
        data_dir=str(tmp_path),
        tier1="memory",
        tier2="memory",
        tier2_options={"faults": faults},
        store=SegmentStoreConfig(container=ContainerConfig(storage_writer=writer)),
    )
    store = build_segment_store(settings)
    await store.start()
    try:
        assert tiers_of(store).status == "UP"
        faults.fail_randomly("create_with_data", 1.0)
        faults.fail_randomly("write", 1.0)
        await store.create_segment("sc/st/0.#epoch.0")
        await store.append("sc/st/0.#epoch.0", b"x" * 100)  # acknowledged all the same
        deadline = time.monotonic() + 30
        while tiers_of(store).status != "DOWN":  # the storage writer's pass fails
            assert time.monotonic() < deadline, store.health()
            await asyncio.sleep(0.1)
        tiers = tiers_of(store)
        assert tiers.details == {"down": "tier2"} and tiers.readiness is True
        assert "injected fault" in str(tiers.children["tier2"].details)
        assert tiers.children["tier1"].status == "UP"
        faults.clear()
        while tiers_of(store).status != "UP":  # the next pass that works clears it
            assert time.monotonic() < deadline, store.health()
            await asyncio.sleep(0.1)
    finally:
        await store.stop()


def tiers_of(store: Any) -> health.Health:
    report = {"tier1": "memory", "tier2": "memory", **store.health()}
    return health.tier_health({("127.0.0.1", 1): report})


def test_a_status_report_gone_stale_is_down_never_up(
    client: Client, healthy: Any, settings: Any, tmp_path: Path
) -> None:
    """A node of this host that stopped writing its status file (a full disk, a hang) is not
    believed: tier-1 is DOWN naming it. It once went back to UP ("no fresh report")."""
    settings.MILLRACE = dataclasses.replace(settings.MILLRACE, data_dir=tmp_path)
    path = node_status_path(tmp_path, healthy.port)
    path.parent.mkdir(parents=True)
    old = time.time() - 60
    path.write_text(json.dumps({"pid": healthy.process.pid, "containers": {}, "updated": old}))
    os.utime(path, (old, old))
    body = assert_down(client, "tiers", "tier1", writes_stop=True)
    assert "no fresh report" in str(body["children"]["tiers"]["children"]["tier1"]), body
