"""A segment store node: in process, and as a real process stopped with SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import uuid

import pytest

from millrace.client.segment_store import SegmentStoreClient
from segment_app.server import node
from tiers.memory import clear_chunk_stores, clear_log_stores

SEG = "sc/st/0.#epoch.0"


async def test_run_node_serves_until_stopped(tmp_path, capsys) -> None:
    clear_log_stores()
    clear_chunk_stores()
    config = node.NodeConfig(
        port=0, data_dir=str(tmp_path), container_count=2, auth_enabled=False,
        tier1="memory", tier2="memory", read_tail_wait_seconds=0.1,
    )  # fmt: skip
    stop = asyncio.Event()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    running = asyncio.ensure_future(
        node.run_node(config, stop=stop, on_ready=lambda s: ready.set_result(s.port))
    )
    port = await asyncio.wait_for(ready, 10)
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    await (await client.append_block(writer, b"event"))
    assert (await client.get_info(SEG)).write_offset == 13
    await client.close()
    stop.set()
    await asyncio.wait_for(running, 10)
    out = capsys.readouterr().out
    assert f"Millrace segment store listening on 127.0.0.1:{port} (data dir {tmp_path})" in out


def test_config_from_environment_and_arguments(tmp_path) -> None:
    env = {
        "MILLRACE_DATA_DIR": str(tmp_path / "env"),
        "MILLRACE_SEGMENTSTORE_PORT": "2000",
        "MILLRACE_CONTAINERS": "3",
        "MILLRACE_TOKEN_SECRET": "s" * 40,
    }
    args = argparse.Namespace(
        data_dir=str(tmp_path / "arg"), host=None, port=None, containers=None, read_tail_wait=1.5
    )
    config = node.config_from(args, env)
    assert config.data_dir == str(tmp_path / "arg")
    assert (config.port, config.container_count, config.read_tail_wait_seconds) == (2000, 3, 1.5)
    assert config.auth_enabled and config.token_secret == "s" * 40
    args.port, args.containers = 0, 8
    assert (node.config_from(args, env).port, node.config_from(args, env).container_count) == (0, 8)


def test_flush_and_cache_settings_reach_the_engine(tmp_path) -> None:
    env = {
        "MILLRACE_DATA_DIR": str(tmp_path),
        "MILLRACE_TOKEN_SECRET": "s" * 40,
        "MILLRACE_TIER2_FLUSH_DELAY_MS": "7000",
        "MILLRACE_TIER2_FLUSH_BYTES": "65536",
        "MILLRACE_CACHE_BYTES": str(64 * 1024 * 1024),
    }
    args = argparse.Namespace(
        data_dir=None, host=None, port=None, containers=None, read_tail_wait=None
    )
    store = node._build_store(node.config_from(args, env))
    container = store.config.container
    assert container.storage_writer.flush_delay_ms == 7000
    assert container.storage_writer.flush_bytes_min == 65536
    assert container.read_index.cache_bytes_max == 64 * 1024 * 1024


def test_main_rejects_bad_configuration(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MILLRACE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MILLRACE_SEGMENTSTORE_PORT", "not-a-port")
    assert node.main([]) == node.EXIT_USAGE
    assert "configuration error" in capsys.readouterr().err
    monkeypatch.delenv("MILLRACE_SEGMENTSTORE_PORT")
    assert node.main(["--read-tail-wait", "90"]) == node.EXIT_USAGE


async def start_node_process(
    data_dir: str, **extra_env: str
) -> tuple[asyncio.subprocess.Process, int]:
    env = {**os.environ, "MILLRACE_AUTH": "off", "MILLRACE_DATA_DIR": data_dir, **extra_env}
    env.pop("MILLRACE_SEGMENTSTORE_PORT", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; from segment_app.server.node import main; "
        "sys.exit(main(sys.argv[1:]))", "--port", "0", "--containers", "2",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+) \(data dir (.*)\)", line)
    assert match, line
    assert match.group(2) == data_dir
    return process, int(match.group(1))


@pytest.mark.slow
async def test_node_process_stops_cleanly_on_sigterm(tmp_path) -> None:
    memory = {"MILLRACE_TIER1": "memory", "MILLRACE_TIER2": "memory"}
    process, port = await start_node_process(str(tmp_path), **memory)
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    await client.create_segment(SEG)
    await client.close()
    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), 60) == 0


def file_tier1_reports_its_epoch() -> bool:
    from tiers.base import DurableDataLog
    from tiers.file import FileDurableDataLog

    return FileDurableDataLog._do_current_epoch is not DurableDataLog._do_current_epoch


@pytest.mark.slow
async def test_node_process_keeps_data_across_restart(tmp_path) -> None:
    if not file_tier1_reports_its_epoch():
        pytest.skip("the file tier-1 does not report its epoch yet (needed to start a node)")
    process, port = await start_node_process(str(tmp_path))
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    await (await client.append_block(writer, [b"durable-1", b"durable-2"]))
    await client.close()
    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), 60) == 0

    process, port = await start_node_process(str(tmp_path))
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    assert await client.setup_append(SEG, writer) == 2
    data = (await client.read_segment(SEG, 0)).data
    assert data == b"\0\0\0\0\0\0\0\x09durable-1\0\0\0\0\0\0\0\x09durable-2"
    await client.close()
    process.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(process.wait(), 60) == 0
