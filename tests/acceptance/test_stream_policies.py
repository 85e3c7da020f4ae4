"""Streams that look after themselves, through a real node: retention and watermarks run by
its Celery beat and worker (periods of 1 s), seen by REST, the Python client and a WebSocket
tail reader, and a worker killed with SIGKILL mid-way only delays them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import (
    Standalone,
    eventually,
    request,
    running_standalone,
)

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    env = {"MILLRACE_RETENTION_PERIOD_S": "1", "MILLRACE_WATERMARK_PERIOD_S": "1"}
    yield from running_standalone(tmp_path_factory, "policies", env)


def _create(node: Standalone, scope: str, body: dict[str, Any]) -> None:
    assert request(node.base, "POST", "/v1/scopes", node.token, {"scopeName": scope})[0] == 201
    status, answer = request(
        node.base, "POST", f"/v1/scopes/{scope}/streams", node.token, {"streamName": "st", **body}
    )
    assert status == 201, answer


def _head_offset(node: Standalone, scope: str) -> int:
    status, answer = request(
        node.base, "GET", f"/v1/scopes/{scope}/streams/st/segments?at=head", node.token
    )
    assert status == 200, answer
    (segment,) = answer["segments"]
    return int(segment["offset"])


def _kill_worker(node: Standalone) -> None:
    pid = node.pid_of("worker")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    eventually(lambda: node.pid_of("worker") not in (None, pid), 60, "the worker's restart")


def test_size_retention_truncates_by_itself_and_outlives_a_killed_worker(node: Standalone) -> None:
    """LIMITED_SIZE_MB 1: beat's rounds truncate the stream so that at least 1 MiB is kept and
    the head moves only forward; after the worker is killed (SIGKILL), truncation goes on."""
    scope = f"r{uuid.uuid4().hex[:10]}"
    policy = {"type": "LIMITED_SIZE_MB", "value": 1}
    _create(node, scope, {"scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1},
                          "retentionPolicy": policy})  # fmt: skip
    event = b"e" * 1016  # 1 KiB with its header
    with StreamManager(node.base, token=node.token) as manager:
        writer = manager.create_writer(scope, "st")
        for _ in range(3):  # 3 MiB in three rounds' time
            for _ in range(1024):
                writer.write_event(event)
            writer.flush()
            time.sleep(1.2)
        first = eventually(lambda: _head_offset(node, scope), 60, "a retention truncation")
        assert first % 1024 == 0 and first <= 2 * MIB  # on an event boundary, >= 1 MiB kept
        _kill_worker(node)
        for _ in range(2048):  # 2 MiB more: the head must move on past them
            writer.write_event(event)
        writer.flush()
        writer.close()
        heads = [first]

        def moved() -> bool:
            heads.append(_head_offset(node, scope))
            return heads[-1] >= 3 * MIB

        eventually(moved, 90, "truncation after the worker's restart")
        assert heads == sorted(heads)  # only forward
        assert heads[-1] <= 4 * MIB  # at least 1 MiB of the 5 MiB kept
        # What is kept reads back whole, from the head on.
        reader = manager.create_reader(scope, "st")
        count = 0
        while (got := reader.read_batch(4096, timeout=5)) and count < 5120:
            assert all(e.data == event for e in got)
            count += len(got)
        reader.close()
        assert count * 1024 >= MIB


def test_watermarks_reach_rest_the_reader_and_a_websocket_tail(node: Standalone) -> None:
    """A writer's marks (note_time, and each flush) become the stream's watermark, with the
    worker killed with SIGKILL right after them; REST, a WebSocket tail reader and a group
    reader's current_time_window see it."""
    scope = f"w{uuid.uuid4().hex[:10]}"
    _create(node, scope, {"scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2},
                          "timestampAggregationTimeout": 30_000})  # fmt: skip
    path = f"/v1/scopes/{scope}/streams/st/watermark"
    status, answer = request(node.base, "GET", path, node.token)
    assert (status, answer["code"]) == (404, "no-watermark")

    url = node.base.replace("http", "ws", 1) + f"/ws/streams/{scope}/st?from=head"

    async def first_watermark() -> dict[str, Any]:
        import websockets

        headers = {"Authorization": f"Token {node.token}"}  # a program: no Origin, a token
        async with websockets.connect(url, additional_headers=headers) as ws:
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 60))
                if message["type"] == "watermark":
                    return message

    with StreamManager(node.base, token=node.token) as manager:
        with manager.create_writer(scope, "st") as writer:
            for i in range(100):
                writer.write_event(f"event {i}".encode(), f"key-{i % 8}")
            writer.note_time(1_000_000)
            for i in range(100, 150):
                writer.write_event(f"event {i}".encode(), f"key-{i % 8}")
            writer.flush()  # the stream sets timestampAggregationTimeout: a mark with "now"
        _kill_worker(node)  # (SIGKILL) the watermark comes from the restarted worker, or before

        def watermark() -> dict[str, Any] | None:
            status, found = request(node.base, "GET", path, node.token)
            return found if status == 200 else None

        found = eventually(watermark, 60, "a watermark")
        assert found["lowerTimeBound"] >= 1_000_000
        assert found["lowerTimeBound"] <= found["upperTimeBound"]
        assert sum(found["streamCut"].values()) > 0
        pushed = asyncio.run(first_watermark())
        assert pushed["number"] >= found["number"]
        assert set(pushed["streamCut"]) == set(found["streamCut"])

        group = manager.create_reader_group(scope, "g", [f"{scope}/st"])
        with group.create_reader("r") as reader:
            read = 0
            while read < 150:
                got = reader.read_batch(1000, timeout=10)
                assert got, "events missing"
                read += sum(1 for e in got if not e.is_checkpoint)
            window = reader.current_time_window(f"{scope}/st")
            newest = watermark()
            assert window.lower_time_bound is not None  # all read: at or past the watermark
            assert window.lower_time_bound <= newest["lowerTimeBound"]
