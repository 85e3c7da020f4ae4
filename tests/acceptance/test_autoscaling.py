"""Auto-scaling through a real node under real load: a stream scaled by event rate (target
1,000 events/s per segment, scale factor 2, minimum 1) written at 5,000 events/s splits, splits
again while the load stays, and merges back to one segment once it stops; a fixed-policy
stream under the same load never scales; a scale by hand in between and Celery beat killed
with SIGKILL after the first split only delay the next; a reader then finds every event, per
key in order.
Windows of 2 s (``MILLRACE_AUTOSCALE_*``) keep it short."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import (
    Standalone,
    eventually,
    request,
    running_standalone,
)

RATE = 5000  # events/s per stream
KEYS = [f"key-{i}" for i in range(16)]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    env = {
        "MILLRACE_AUTOSCALE_WINDOW_S": "2",
        "MILLRACE_AUTOSCALE_COOLDOWN_S": "2",
        "MILLRACE_AUTOSCALE_MUTE_S": "1",
    }
    yield from running_standalone(tmp_path_factory, "autoscale", env)


def _segment_count(node: Standalone, scope: str, stream: str) -> int:
    status, answer = request(
        node.base, "GET", f"/v1/scopes/{scope}/streams/{stream}/segments", node.token
    )
    assert status == 200, answer
    return len(answer["segments"])


def _scale_by_hand(node: Standalone, scope: str, stream: str) -> int:
    """Split the first current segment by hand (REST), retrying while the stream is busy with
    an automatic scale; the HTTP status it ended with."""
    path = f"/v1/scopes/{scope}/streams/{stream}"
    deadline = time.monotonic() + 30
    while True:
        status, found = request(node.base, "GET", f"{path}/segments", node.token)
        first = found["segments"][0]
        middle = (first["keyStart"] + first["keyEnd"]) / 2
        body = {"sealedSegments": [first["segmentId"]],
                "newRanges": [[first["keyStart"], middle], [middle, first["keyEnd"]]]}  # fmt: skip
        status, answer = request(node.base, "POST", f"{path}/scale", node.token, body)
        if status < 300 or time.monotonic() > deadline:
            return status
        assert status in (409, 503), answer  # moved on or busy: read the segments again
        time.sleep(0.2)


def _write(manager: StreamManager, scope: str, stream: str, stop: threading.Event) -> int:
    """Write ``RATE`` events/s ("key:seq") until ``stop``; the number written."""
    sent = 0
    with manager.create_writer(scope, stream) as writer:
        started = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - started) * RATE)
            while sent < due:
                key = KEYS[sent % len(KEYS)]
                writer.write_event(f"{key}:{sent}".encode(), key)
                sent += 1
            time.sleep(0.01)
    return sent


def test_a_stream_scaled_by_rate_splits_under_load_and_merges_back(node: Standalone) -> None:
    scope = f"a{uuid.uuid4().hex[:10]}"
    assert request(node.base, "POST", "/v1/scopes", node.token, {"scopeName": scope})[0] == 201
    by_rate = {"type": "BY_RATE_IN_EVENTS_PER_SEC", "targetRate": 1000, "scaleFactor": 2,
               "minSegments": 1}  # fmt: skip
    for name, policy in (("rated", by_rate), ("fixed", {"type": "FIXED_NUM_SEGMENTS"})):
        body = {"streamName": name, "scalingPolicy": policy}
        status, answer = request(node.base, "POST", f"/v1/scopes/{scope}/streams", node.token, body)
        assert status == 201, answer

    stop = threading.Event()
    written: dict[str, int] = {}
    with StreamManager(node.base, token=node.token) as manager:
        threads = [
            threading.Thread(
                target=lambda n=name: written.__setitem__(n, _write(manager, scope, n, stop))
            )
            for name in ("rated", "fixed")
        ]
        for thread in threads:
            thread.start()
        try:
            counts = [1]
            killed: list[int] = []

            rates: list[float] = []

            by_hand: list[int] = []

            def split_twice() -> bool:
                counts.append(_segment_count(node, scope, "rated"))
                if counts[-1] >= 2 and not by_hand:  # and a scale by hand meanwhile
                    by_hand.append(_scale_by_hand(node, scope, "rated"))
                status, found = request(
                    node.base, "GET", f"/v1/scopes/{scope}/streams/rated/metrics", node.token
                )
                assert status == 200, found
                rates.append(found["eventsPerSecond"])
                if counts[-1] >= 2 and not killed:  # after the first split, beat dies
                    killed.append(node.pid_of("beat") or 0)
                    os.kill(killed[0], signal.SIGKILL)
                return counts[-1] >= 4

            eventually(split_twice, 60, "two splits under load (beat killed after the first)")
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
        assert by_hand and by_hand[0] < 300, by_hand  # the scale by hand went through
        assert counts == sorted(counts)  # under load it only grows
        assert max(rates) > 1000  # what the monitor measured, as REST shows it
        assert _segment_count(node, scope, "fixed") == 1

        try:
            eventually(
                lambda: _segment_count(node, scope, "rated") == 1,
                60,
                "the merge back to one segment",
            )
        except AssertionError:
            lines = [x for x in node.output().splitlines() if "auto-scal" in x or "Error" in x]
            raise AssertionError("\n".join(lines[-40:])) from None
        assert _segment_count(node, scope, "fixed") == 1
        scrape = urllib.request.Request(  # as Prometheus scrapes: a token, no cookie
            f"{node.base}/metrics", headers={"Authorization": f"Token {node.token}"}
        )
        with urllib.request.urlopen(scrape, timeout=30) as response:
            text = response.read().decode()
        assert 'outcome="ok",task="millrace.scale_stream"' in text  # the worker counted them
        until = int(time.time() * 1000) + 60_000
        status, events = request(
            node.base, "GET",
            f"/v1/scopes/{scope}/streams/fixed/scaling-events?from=0&to={until}", node.token,
        )  # fmt: skip
        assert status == 200 and len(events["scalingEvents"]) == 1  # never scaled

        group = manager.create_reader_group(scope, "check", [f"{scope}/rated"])
        seen: dict[str, list[int]] = {key: [] for key in KEYS}
        with group.create_reader("r") as reader:
            total = 0
            while total < written["rated"]:
                batch = reader.read_batch(4096, timeout=15)
                assert batch, f"read {total} of {written['rated']} events"
                for event in batch:
                    if event.is_checkpoint:
                        continue
                    key, seq = event.data.decode().split(":")
                    seen[key].append(int(seq))
                    total += 1
    assert total == written["rated"]
    for key, sequence in seen.items():
        assert sequence == sorted(sequence), f"{key} out of order"
        assert len(set(sequence)) == len(sequence), f"{key} duplicated"
