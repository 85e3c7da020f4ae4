"""The standalone node, unchanged, on the production tiers: ``MILLRACE_TIER2=s3`` against
moto's S3 server, alone and with ``MILLRACE_TIER1=jetstream`` on a nats-server (real server
processes on 127.0.0.1, started here), and ``MILLRACE_TIER2=hdfs`` against the WebHDFS test
double. Events written go to the bucket as chunk objects
(credentials from the standard ``AWS_*`` variables) and read back; after a restart, with a
cold cache, every event reads back again (what tier-1 no longer holds, from the bucket), per
key in order."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import READY_LINE, Standalone, eventually, free_ports
from tests.tiers.nats_servers import nats_servers
from tests.tiers.s3_server import CREDENTIALS, make_bucket, moto_server
from tests.tiers.webhdfs_server import webhdfs_server

pytestmark = pytest.mark.slow

EVENTS = 20_000
KEYS = [f"k{i}" for i in range(4)]


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with moto_server() as url:
        make_bucket(url, "millrace")
        yield url


def _env(url: str, prefix: str) -> dict[str, str]:
    options = {"bucket": "millrace", "prefix": prefix, "endpoint_url": url}
    return {
        **CREDENTIALS,
        "MILLRACE_TIER2": "s3",
        "MILLRACE_TIER2_OPTIONS": json.dumps(options),
        "MILLRACE_TIER2_FLUSH_DELAY_MS": "200",
        "MILLRACE_TIER2_FLUSH_BYTES": "65536",
    }


def _start(data_dir: Path, env: dict[str, str]) -> Standalone:
    http, wire, metrics = free_ports(3)
    env = {"MILLRACE_SEGMENTSTORE_METRICS_PORT": str(metrics), **env}
    node = Standalone(data_dir, http, wire, env=env)
    node.wait_for(READY_LINE)
    return node


def _stored_bytes(url: str, prefix: str) -> int:
    import boto3

    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="millrace", Prefix=prefix)
    total = sum(item["Size"] for page in pages for item in page.get("Contents", []))
    client.close()
    return total


def _read_all(node: Standalone, scope: str) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {key: [] for key in KEYS}
    with StreamManager(node.base, token=node.token) as manager:
        reader = manager.create_reader(scope, "st")
        total = 0
        while total < EVENTS:
            batch = reader.read_batch(4096, timeout=30)
            assert batch, f"read {total} of {EVENTS} events"
            for event in batch:
                key, seq, _ = event.data.decode().split(":")
                seen[key].append(int(seq))
                total += 1
        reader.close()
    return seen


def _round_trip(data_dir: Path, env: dict[str, str], stored: Callable[[], int]) -> None:
    """Write, see the bytes in tier-2 (``stored``), read back; restart on the same data dir
    (metadata, and tier-1 files if any) and read back again. The events go in two halves,
    the second once the first is all in tier-2, so every segment's data in tier-2 is the
    work of more than one flush (on a busy machine one flush could otherwise take it all)."""
    scope = f"s{uuid.uuid4().hex[:8]}"
    pad = "x" * 180
    node = _start(data_dir, env)

    def event(i: int) -> str:
        return f"{KEYS[i % 4]}:{i}:{pad}"

    try:
        with StreamManager(node.base, token=node.token) as manager:
            manager.create_scope(scope)
            manager.create_stream(scope, "st", 2)
            with manager.create_writer(scope, "st") as writer:
                for half in (range(EVENTS // 2), range(EVENTS // 2, EVENTS)):
                    for i in half:
                        writer.write_event(event(i), routing_key=KEYS[i % 4])
                    writer.flush()
                    size = sum(8 + len(event(i)) for i in range(half.stop))
                    eventually(lambda n=size: stored() >= n, 60, "the events in tier-2")
        expected = {key: list(range(n, EVENTS, 4)) for n, key in enumerate(KEYS)}
        assert _read_all(node, scope) == expected
        assert node.stop() == 0
        node = _start(data_dir, env)
        assert _read_all(node, scope) == expected  # a cold cache: from the bucket
    finally:
        node.kill()


def test_on_s3_events_go_to_the_bucket_and_read_back_after_a_restart(
    tmp_path: Path, s3_url: str
) -> None:
    _round_trip(tmp_path / "data", _env(s3_url, "s3/"), lambda: _stored_bytes(s3_url, "s3/"))


def test_on_jetstream_and_s3_events_read_back_after_a_restart(tmp_path: Path, s3_url: str) -> None:
    with nats_servers(tmp_path / "nats") as (server,):
        env = {**_env(s3_url, "js/"), "MILLRACE_TIER1": "jetstream",
               "MILLRACE_TIER1_OPTIONS": json.dumps({"servers": [server.url]})}  # fmt: skip
        _round_trip(tmp_path / "data", env, lambda: _stored_bytes(s3_url, "js/"))
        assert not (tmp_path / "data" / "tier1").exists()  # tier-1 was JetStream, not files


def test_on_hdfs_events_go_to_the_files_and_read_back_after_a_restart(tmp_path: Path) -> None:
    """``MILLRACE_TIER2=hdfs`` against the WebHDFS test double (no Hadoop cluster can run
    here): the chunks are files under the root, read back after a restart."""
    with webhdfs_server(tmp_path / "hdfs") as namenode:
        options = {"url": namenode.url, "root": "/millrace"}
        env = {
            "MILLRACE_TIER2": "hdfs",
            "MILLRACE_TIER2_OPTIONS": json.dumps(options),
            "MILLRACE_TIER2_FLUSH_DELAY_MS": "200",
            "MILLRACE_TIER2_FLUSH_BYTES": "65536",
        }

        def stored() -> int:
            files = (tmp_path / "hdfs" / "millrace").rglob("*~c")
            return sum(f.stat().st_size for f in files if f.is_file())

        _round_trip(tmp_path / "data", env, stored)
        assert any("op=APPEND" in r for r in namenode.requests)  # flushes appended
