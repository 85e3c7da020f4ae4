"""Scope quotas on a three-node cluster: two scopes write as fast as they can, through the
blocking writer as the README shows it; the one with an append-rate quota is held to it across
the whole cluster (its streams' segments are on every node) and the other keeps its rate; more
streams in the limited scope do not raise its total; a stored-bytes quota refuses appends at
its limit with an error that says why; and every acknowledged event is there to read."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.cluster import LocalCluster
from tests.acceptance.postgres import PrivatePostgres
from tests.acceptance.standalone_node import eventually, request

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("quotas")]

QUOTA = 150_000  # bytes per second, cluster-wide
EVENT = b"q" * 500
SECONDS = 12.0


@pytest.fixture(scope="module")
def cluster(
    module_postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """One cluster for the module's tests (each its own scope; on one worker)."""
    environ = {"MILLRACE_QUOTA_PERIOD_S": "1", "MILLRACE_CANARY_PERIOD_S": "0"}
    where = tmp_path_factory.mktemp("quotas") / "cluster"
    yield from LocalCluster(where, module_postgres.url, environ=environ).running()


class Writers:
    """Blocking writers of ``scope``'s streams, each in a thread, counting what was
    acknowledged (a ``flush`` every 20 events)."""

    def __init__(self, base: str, token: str, scope: str, streams: list[str]) -> None:
        self.acked: dict[str, int] = dict.fromkeys(streams, 0)
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, args=(base, token, scope, s))
                        for s in streams]  # fmt: skip

    def _write(self, base: str, token: str, scope: str, stream: str) -> None:
        try:
            with (
                StreamManager(base, token=token) as manager,
                manager.create_writer(scope, stream, delivery_timeout_s=15) as writer,
            ):
                while not self.stop.is_set():
                    for i in range(20):
                        writer.write_event(EVENT, routing_key=f"k{i}")
                    writer.flush()
                    self.acked[stream] += 20
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def rate(self, seconds: float) -> float:
        """Bytes per second acknowledged over ``seconds`` (the writers already running)."""
        return rates([self], seconds)[0]

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def rates(writers: list[Writers], seconds: float) -> list[float]:
    """Bytes per second each of ``writers`` had acknowledged over the same ``seconds``."""
    before = [sum(w.acked.values()) for w in writers]
    time.sleep(seconds)
    return [
        (sum(w.acked.values()) - b) * len(EVENT) / seconds
        for w, b in zip(writers, before, strict=True)
    ]


def _events(manager: StreamManager, scope: str, stream: str) -> int:
    reader, count = manager.create_reader(scope, stream), 0
    while reader.read_next(timeout=5) is not None:
        count += 1
    return count


def test_a_scope_is_held_to_its_quota_across_the_cluster_and_the_other_keeps_its_rate(
    cluster: LocalCluster,
) -> None:
    base, token = cluster.base(0), cluster.token
    manager = StreamManager(base, token=token)
    for scope in ("lim", "free"):
        manager.create_scope(scope)
        for stream in ("a", "b", "c", "d"):
            manager.create_stream(scope, stream, initial_segments=6)  # (on every node)
    status, body = request(base, "PUT", "/v1/scopes/lim/quota", token,
                           {"appendBytesPerSecond": QUOTA})  # fmt: skip
    assert status == 200, body
    time.sleep(3)  # (every node takes the quota at its next exchange)
    with Writers(base, token, "free", ["a"]) as alone:
        time.sleep(3)
        free_alone = alone.rate(SECONDS)
    with Writers(base, token, "lim", ["a"]) as limited, Writers(base, token, "free", ["a"]) as free:
        time.sleep(4)  # (the shares settle)
        lim_rate, free_rate = rates([limited, free], SECONDS)
    print(f"quota {QUOTA} B/s: lim {lim_rate:,.0f} B/s; free {free_rate:,.0f} B/s "
          f"(alone {free_alone:,.0f} B/s)")  # fmt: skip
    assert 0.8 * QUOTA <= lim_rate <= 1.2 * QUOTA
    assert free_rate >= 2 * QUOTA  # (the other scope is not held back to it)
    # four streams of the limited scope written at once: the scope's total is the same
    with Writers(base, token, "lim", ["a", "b", "c", "d"]) as many:
        time.sleep(4)
        many_rate = many.rate(SECONDS)
    print(f"lim over four streams {many_rate:,.0f} B/s")
    assert 0.8 * QUOTA <= many_rate <= 1.2 * QUOTA
    assert not (limited.errors or free.errors or many.errors or alone.errors)
    # its nodes reported the delay they added
    shown = request(base, "GET", "/v1/scopes/lim/quota", token)[1]
    assert shown["throttleSeconds"] > 0
    # nothing acknowledged is missing
    acked = {s: limited.acked.get(s, 0) + many.acked[s] for s in many.acked}
    for stream, count in acked.items():
        assert _events(manager, "lim", stream) >= count, stream
    manager.close()


def test_a_full_scope_refuses_appends_saying_why_and_takes_them_again(
    cluster: LocalCluster,
) -> None:
    base, token = cluster.base(0), cluster.token
    manager = StreamManager(base, token=token)
    manager.create_scope("full")
    manager.create_stream("full", "s", initial_segments=3)
    with manager.create_writer("full", "s") as writer:
        for i in range(100):
            writer.write_event(EVENT, routing_key=f"k{i}")
    status, _ = request(base, "PUT", "/v1/scopes/full/quota", token, {"storedBytes": 10_000})
    assert status == 200

    def stored() -> int:
        return request(base, "GET", "/v1/scopes/full/quota", token)[1]["used"]["storedBytes"] or 0

    eventually(lambda: stored() > 10_000, 30, "the stored bytes measured")

    def refused() -> str:
        try:
            with manager.create_writer("full", "s", delivery_timeout_s=4) as writer:
                writer.write_event(EVENT, routing_key="late")
        except Exception as exc:
            return str(exc)
        return ""

    reason = eventually(refused, 60, "appends refused")
    assert "at its stored-bytes quota" in reason, reason
    request(base, "PUT", "/v1/scopes/full/quota", token, {"storedBytes": 10_000_000})
    eventually(lambda: not refused(), 60, "appends taken again")
    assert _events(manager, "full", "s") >= 101
    manager.close()
