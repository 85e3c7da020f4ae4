"""A standalone node on ``MILLRACE_TIER2=s3`` (moto's S3 server, a real process) whose tier-2
goes away for 60 s under steady writes: 30 s of errors (every connection to it reset), then
30 s of silence (connections open, nothing answered). A loopback proxy between the node and
moto makes both faults (``FaultyProxy``, a test double of the network only).

Through the outage the writer's appends keep being acknowledged from tier-1 (no error, p99 of a
flush under 2 s), health names tier-2, and a read of data that is only in tier-2 (the cache is
cold after a restart, and smaller than the data) is a retriable 503, never wrong data. Once
tier-2 answers again the storage writer catches up within 60 s, and every acknowledged event
reads back once, per key in order."""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from millrace.client.controller import AsyncControllerClient
from millrace.client.manager import StreamManager
from millrace.client.transport import segment_store as ssc
from tests.acceptance.faulty_proxy import FaultyProxy
from tests.acceptance.standalone_node import (
    READY_LINE,
    Standalone,
    eventually,
    free_ports,
    request,
)
from tests.tiers.nats_servers import nats_servers
from tests.tiers.s3_server import CREDENTIALS, make_bucket, moto_server

pytestmark = pytest.mark.slow

KEYS = [f"k{i}" for i in range(4)]
#: Old events: 24 MB in the stream's one segment, more than its container's cache (16 MiB), so
#: after a restart the first are in tier-2 only.
OLD_EVENTS = 24_000
OUTAGE_HALF_S = 30.0
#: Tier-2 lag of a node that has caught up with the steady writer (about 3 s of its appends;
#: an outage of 60 s leaves some 20 times as much).
CAUGHT_UP_BYTES = 32 * 1024


@pytest.fixture
def proxied_s3() -> Iterator[tuple[FaultyProxy, str]]:
    with moto_server() as url:
        make_bucket(url, "millrace")
        proxy = FaultyProxy(int(url.rsplit(":", 1)[1]))
        try:
            yield proxy, f"http://127.0.0.1:{proxy.port}"
        finally:
            proxy.close()


def _start(data_dir: Path, url: str, metrics: int, **more: str) -> Standalone:
    options = {"bucket": "millrace", "prefix": "out/", "endpoint_url": url,
               "connect_timeout_s": 2, "read_timeout_s": 5, "max_attempts": 2}  # fmt: skip
    env = {
        **CREDENTIALS,
        "MILLRACE_TIER2": "s3",
        "MILLRACE_TIER2_OPTIONS": json.dumps(options),
        "MILLRACE_TIER2_FLUSH_DELAY_MS": "200",
        "MILLRACE_CACHE_BYTES": str(16 * 1024 * 1024),
        "MILLRACE_SEGMENTSTORE_METRICS_PORT": str(metrics),
        **more,
    }
    http, wire = free_ports(2)
    node = Standalone(data_dir, http, wire, env=env)
    node.wait_for(READY_LINE)
    return node


def _lag_bytes(node: Standalone, metrics: int) -> float:
    """Bytes appended and not yet in tier-2, all containers (the node's metrics port)."""
    return node.store_metric("millrace_container_tier2_lag_bytes", metrics)


class SteadyWriter(threading.Thread):
    """20 events of each round, then a flush, about 20 rounds a second; each flush's time."""

    def __init__(self, node: Standalone, scope: str) -> None:
        super().__init__(daemon=True)
        self.node, self.scope = node, scope
        self.stop_at = threading.Event()
        self.flush_seconds: list[float] = []
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with (
                StreamManager(self.node.base, token=self.node.token) as manager,
                manager.create_writer(self.scope, "st") as writer,
            ):
                while not self.stop_at.is_set():
                    started = time.monotonic()
                    for _ in range(20):
                        n = OLD_EVENTS + self.written
                        writer.write_event(f"{KEYS[n % 4]}:{n}:steady", routing_key=KEYS[n % 4])
                        self.written += 1
                    writer.flush()
                    self.flush_seconds.append(time.monotonic() - started)
                    time.sleep(max(0.0, 0.05 - (time.monotonic() - started)))
        except BaseException as exc:  # the test reports it
            self.error = exc


def _read_all(node: Standalone, scope: str, total: int) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {key: [] for key in KEYS}
    with StreamManager(node.base, token=node.token) as manager:
        reader = manager.create_reader(scope, "st")
        count = 0
        while count < total:
            batch = reader.read_batch(4096, timeout=30)
            assert batch, f"read {count} of {total} events"
            for event in batch:
                key, n, _ = event.data.decode().split(":")
                seen[key].append(int(n))
                count += 1
        assert not reader.read_batch(4096, timeout=1)  # nothing more: no duplicate
        reader.close()
    return seen


def _numbers(node: Standalone, scope: str) -> list[int]:
    """The numbers of the events ``k0:<n>:…`` of ``scope/st``, in the order read (the raw
    appends of a program's own client, ``raw``, left out)."""
    with StreamManager(node.base, token=node.token) as manager:
        reader = manager.create_reader(scope, "st")
        numbers = []
        while batch := reader.read_batch(4096, timeout=5):
            numbers += [int(e.data.split(b":")[1]) for e in batch if e.data != b"raw"]
        reader.close()
    return numbers


def test_a_60_s_tier2_outage_under_steady_writes_loses_nothing_and_heals(
    tmp_path: Path, proxied_s3: tuple[FaultyProxy, str]
) -> None:
    proxy, url = proxied_s3
    (metrics,) = free_ports(1)
    scope = f"o{uuid.uuid4().hex[:8]}"
    node = _start(tmp_path / "data", url, metrics)
    try:
        with StreamManager(node.base, token=node.token) as manager:
            manager.create_scope(scope)
            manager.create_stream(scope, "st", 1)
            with manager.create_writer(scope, "st") as writer:
                for n in range(OLD_EVENTS):
                    writer.write_event(f"{KEYS[n % 4]}:{n}:{'o' * 1000}", routing_key=KEYS[n % 4])
                writer.flush()
        eventually(lambda: _lag_bytes(node, metrics) == 0, 60, "the old events in tier-2")
        assert node.stop() == 0
        node = _start(tmp_path / "data", url, metrics)  # a cold cache: old events in tier-2 only

        steady = SteadyWriter(node, scope)
        steady.start()
        time.sleep(3)
        proxy.refuse(True)  # tier-2 fails: every connection reset
        body = node.wait_health(up=False, naming="tiers", timeout=25)
        assert "tier2" in json.dumps(body)
        status, answer = request(
            node.base, "GET", f"/v1/scopes/{scope}/streams/st/events?from=head&limit=10",
            node.token,
        )  # fmt: skip
        assert status == 503, answer  # retriable (Retry-After), never wrong data
        assert "tier-2" in answer["message"], answer
        time.sleep(max(0.0, OUTAGE_HALF_S - 25))
        proxy.refuse(False)
        proxy.stall(OUTAGE_HALF_S)  # tier-2 hangs: nothing answered (returns when it flows)
        outage_end = time.monotonic()
        assert steady.is_alive() and steady.error is None, steady.error
        # Caught up: what waits for tier-2 is down to the last moments' appends. (Never exactly
        # nothing while the steady writer goes on: it appends every 50 ms, the storage writer
        # flushes what is 200 ms old, and the metrics port shows a snapshot a few seconds old.)
        assert _lag_bytes(node, metrics) > 8 * CAUGHT_UP_BYTES  # the outage's backlog
        eventually(
            lambda: _lag_bytes(node, metrics) <= CAUGHT_UP_BYTES, 60, "tier-2 caught up in 60 s"
        )
        caught_up_s = time.monotonic() - outage_end
        node.wait_health(up=True, timeout=30)
        steady.stop_at.set()
        steady.join(30)
        assert steady.error is None, steady.error
        flushes = sorted(steady.flush_seconds)
        p99 = flushes[int(len(flushes) * 0.99)]
        median = statistics.median(flushes)
        print(f"flushes {len(flushes)}, median {median:.3f} s, p99 {p99:.3f} s,"
              f" max {flushes[-1]:.3f} s; caught up in {caught_up_s:.1f} s")  # fmt: skip
        assert p99 < 2.0, flushes[-20:]
        total = OLD_EVENTS + steady.written
        expected = {key: list(range(i, total, 4)) for i, key in enumerate(KEYS)}
        assert _read_all(node, scope, total) == expected
    finally:
        node.kill()


async def _raw_append_until_refused(node: Standalone, scope: str) -> str:
    """Append over the wire protocol (a program's own client, no retries) until the node
    refuses; the refusal's message."""
    controller = AsyncControllerClient(node.base, node.token)
    try:
        token = await controller.delegation_token(scope, "st")
        host, port = await controller.segment_uri(scope, "st", 0)
        client = await ssc.SegmentStoreClient.connect(host, port, delegation_token=token)
        try:
            writer = uuid.uuid4()
            await client.setup_append(f"{scope}/st/0.#epoch.0", writer)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    await asyncio.wait_for(await client.append_block(writer, b"raw"), 30)
                except ssc.ContainerOfflineError as exc:
                    return str(exc)
                await asyncio.sleep(0.1)
            raise AssertionError("the node never refused an append")
        finally:
            await client.close()
    finally:
        await controller.close()


def test_past_the_backlog_appends_are_held_then_refused_and_writers_send_them_again(
    tmp_path: Path, proxied_s3: tuple[FaultyProxy, str]
) -> None:
    """Tier-2 down while a writer writes 1 KB events to one segment without pause: once the
    data waiting for tier-2 fills the container's 16 MiB cache, appends are held back, then
    (after ``MILLRACE_BACKLOG_REFUSE_MS``) refused with a retriable WrongHost that says why;
    the Python writer holds its events (back-pressure) and sends them again by itself, and
    once tier-2 is back everything it wrote is stored once, in order."""
    proxy, url = proxied_s3
    (metrics,) = free_ports(1)
    scope = f"b{uuid.uuid4().hex[:8]}"
    node = _start(tmp_path / "data", url, metrics, MILLRACE_BACKLOG_REFUSE_MS="2000")
    try:
        with StreamManager(node.base, token=node.token) as manager:
            manager.create_scope(scope)
            manager.create_stream(scope, "st", 1)
        proxy.refuse(True)
        stop, done = threading.Event(), threading.Event()
        written: list[int] = [0]
        errors: list[BaseException] = []

        def write() -> None:
            try:
                with (
                    StreamManager(node.base, token=node.token) as manager,
                    manager.create_writer(scope, "st", pending_events_max=10_000) as writer,
                ):
                    while not stop.is_set():
                        writer.write_event(f"k0:{written[0]}:{'b' * 1000}")
                        written[0] += 1
                    writer.flush()
            except BaseException as exc:  # the test reports it
                errors.append(exc)
            done.set()

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        refusal = asyncio.run(_raw_append_until_refused(node, scope))
        assert "appends refused" in refusal and "retry later" in refusal, refusal
        held = written[0]
        time.sleep(3)  # the writer is held back (its pending events at the most) and refused
        assert written[0] - held <= 10_000 and not errors, errors
        assert _lag_bytes(node, metrics) < 48 * 1024 * 1024  # bounded: no runaway backlog
        proxy.refuse(False)
        time.sleep(3)
        stop.set()
        assert done.wait(90), "the writer's flush never completed"
        assert not errors, errors
        numbers = _numbers(node, scope)
        assert written[0] > held and numbers == list(range(written[0]))  # each once, in order
    finally:
        node.kill()


def test_tier1_down_acknowledges_nothing_and_the_node_recovers_by_itself(tmp_path: Path) -> None:
    """``MILLRACE_TIER1=jetstream`` on one nats-server, SIGKILLed under steady writes and
    started again 10 s later: meanwhile nothing is acknowledged and health names tier-1; then
    the containers recover by themselves, the writer's flushes complete, and every event it
    wrote is stored once, in order."""
    with nats_servers(tmp_path / "nats") as (server,):
        options = {"servers": [server.url], "request_timeout_s": 5}
        env = {"MILLRACE_TIER1": "jetstream", "MILLRACE_TIER1_OPTIONS": json.dumps(options)}
        http, wire = free_ports(2)
        node = Standalone(tmp_path / "data", http, wire, env=env)
        try:
            node.wait_for(READY_LINE)
            scope = f"j{uuid.uuid4().hex[:8]}"
            with StreamManager(node.base, token=node.token) as manager:
                manager.create_scope(scope)
                manager.create_stream(scope, "st", 1)
            flushed: list[tuple[float, int]] = []  # (when, events written before the flush)
            stop, errors = threading.Event(), []

            def write() -> None:
                try:
                    with (
                        StreamManager(node.base, token=node.token) as manager,
                        manager.create_writer(scope, "st") as writer,
                    ):
                        n = 0
                        while not stop.is_set():
                            for _ in range(20):
                                writer.write_event(f"k0:{n}:j")
                                n += 1
                            writer.flush()
                            flushed.append((time.monotonic(), n))
                            time.sleep(0.05)
                except BaseException as exc:  # the test reports it
                    errors.append(exc)

            thread = threading.Thread(target=write, daemon=True)
            thread.start()
            eventually(lambda: len(flushed) >= 20, 30, "writes acknowledged")
            server.kill()
            killed = time.monotonic()
            body = node.wait_health(up=False, naming="tiers", timeout=20)
            assert "tier1" in json.dumps(body)
            time.sleep(max(0.0, killed + 10 - time.monotonic()))
            late = [when for when, _ in flushed if when > killed + 1]
            assert not late, "a flush completed while tier-1 was down"
            server.start()
            node.wait_health(up=True, timeout=60)  # the containers came back by themselves
            before = len(flushed)
            eventually(lambda: len(flushed) > before + 20, 60, "writes acknowledged again")
            stop.set()
            thread.join(60)
            assert not errors, errors
            written = flushed[-1][1]
            assert _numbers(node, scope) == list(range(written))  # each once, in order
        finally:
            node.kill()


def test_with_a_disk_cache_the_backlog_outgrows_memory_without_refusals(
    tmp_path: Path, proxied_s3: tuple[FaultyProxy, str]
) -> None:
    """``MILLRACE_CACHE_DISK_BYTES``: with tier-2 down, 40 MB written to one segment whose
    container has a 16 MiB memory cache are all acknowledged (what waits for tier-2 goes to
    the LMDB cache on disk), and all of it reaches tier-2 and reads back once it returns."""
    proxy, url = proxied_s3
    (metrics,) = free_ports(1)
    scope = f"d{uuid.uuid4().hex[:8]}"
    node = _start(tmp_path / "data", url, metrics, MILLRACE_BACKLOG_REFUSE_MS="2000",
                  MILLRACE_CACHE_DISK_BYTES=str(96 * 1024 * 1024))  # fmt: skip
    try:
        with StreamManager(node.base, token=node.token) as manager:
            manager.create_scope(scope)
            manager.create_stream(scope, "st", 1)
            proxy.refuse(True)
            with manager.create_writer(scope, "st") as writer:
                for n in range(40_000):
                    writer.write_event(f"k0:{n}:{'d' * 1000}")
                writer.flush()  # acknowledged with tier-2 down
        on_disk = eventually(  # (the metrics port's figures are a few seconds old)
            lambda: node.store_metric("millrace_container_disk_cache_bytes", metrics) > 0, 30,
            "data in the disk cache",
        )  # fmt: skip
        assert on_disk
        assert _lag_bytes(node, metrics) > 16 * 1024 * 1024  # more waits than memory holds
        proxy.refuse(False)
        eventually(lambda: _lag_bytes(node, metrics) == 0, 90, "tier-2 caught up")
        assert _numbers(node, scope) == list(range(40_000))
    finally:
        node.kill()
