"""A segment store node: in process, and as a real process stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import os
import pathlib
import re
import signal
import sys
import uuid

import pytest

from millrace.client.transport.segment_store import SegmentStoreClient
from millrace.kernel.config import SegmentStoreSettings
from millrace.ops import cli
from segment_app.engine.config import ContainerConfig, SegmentStoreConfig, StorageWriterConfig
from segment_app.server import node
from segment_app.server.services import ServerConfig
from tiers.memory import clear_chunk_stores, clear_log_stores

SEG = "sc/st/0.#epoch.0"


async def test_run_node_serves_until_stopped(tmp_path, capsys) -> None:
    clear_log_stores()
    clear_chunk_stores()
    config = SegmentStoreSettings(
        port=0, data_dir=tmp_path, container_count=2, auth_enabled=False,
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


def test_settings_from_environment_and_options(tmp_path, monkeypatch) -> None:
    """The node's settings are read once: the environment, then the command line over it."""
    seen: list[SegmentStoreSettings] = []
    monkeypatch.setattr(node, "serve", lambda settings, *_: seen.append(settings) or 0)
    env = {
        "MILLRACE_DATA_DIR": str(tmp_path / "env"),
        "MILLRACE_SEGMENTSTORE_PORT": "2000",
        "MILLRACE_CONTAINERS": "3",
        "MILLRACE_TOKEN_SECRET": "s" * 40,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = ["segmentstore", "--data-dir", str(tmp_path / "arg"), "--read-tail-wait", "1.5"]
    assert cli.main(argv) == 0
    assert seen[-1].data_dir == tmp_path / "arg"
    assert (seen[-1].port, seen[-1].container_count, seen[-1].read_tail_wait_seconds) == (
        2000, 3, 1.5,
    )  # fmt: skip
    assert seen[-1].auth_enabled and seen[-1].token_secret == "s" * 40
    assert cli.main(["segmentstore", "--port", "0", "--containers", "8"]) == 0
    assert (seen[-1].port, seen[-1].container_count) == (0, 8)


def test_each_part_gets_its_settings(tmp_path) -> None:
    env = {
        "MILLRACE_DATA_DIR": str(tmp_path),
        "MILLRACE_TOKEN_SECRET": "s" * 40,
        "MILLRACE_TIER2_FLUSH_DELAY_MS": "7000",
        "MILLRACE_TIER2_FLUSH_BYTES": "65536",
        "MILLRACE_CACHE_BYTES": str(64 * 1024 * 1024),
        "MILLRACE_AUTOSCALE_WINDOW_S": "30",
    }
    settings = SegmentStoreSettings.from_env(env)
    store = node._build_store(settings)
    container = store.config.container
    assert container.storage_writer.flush_delay_ms == 7000
    assert container.storage_writer.flush_bytes_min == 65536
    assert container.read_index.cache_bytes_max == 64 * 1024 * 1024
    server = node.server_config(settings)
    assert (server.port, server.autoscale_window_s, server.token_secret) == (12345, 30, "s" * 40)


def test_defaults_are_written_once() -> None:
    """The server's and the engine's defaults are the node's settings' (one home each)."""
    defaults = SegmentStoreSettings(data_dir=pathlib.Path("."))
    assert node.server_config(defaults) == ServerConfig(token_secret="")
    engine = node.store_settings(defaults).store
    assert engine == SegmentStoreConfig(
        container=ContainerConfig(
            storage_writer=StorageWriterConfig(flush_delay_ms=defaults.tier2_flush_delay_ms)
        )
    )


def test_serve_rejects_bad_configuration(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MILLRACE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MILLRACE_SEGMENTSTORE_PORT", "not-a-port")
    assert cli.main(["segmentstore"]) == node.EXIT_USAGE
    assert "configuration error" in capsys.readouterr().err
    monkeypatch.delenv("MILLRACE_SEGMENTSTORE_PORT")
    assert cli.main(["segmentstore", "--read-tail-wait", "90"]) == node.EXIT_USAGE
    assert "read_tail_wait_seconds must be within" in capsys.readouterr().err
    monkeypatch.setenv("MILLRACE_EVENT_LOOP", "trio")
    assert cli.main(["segmentstore"]) == node.EXIT_USAGE
    assert "MILLRACE_EVENT_LOOP must be one of auto, uvloop, asyncio" in capsys.readouterr().err


async def start_node_process(
    data_dir: str, **extra_env: str
) -> tuple[asyncio.subprocess.Process, int]:
    env = {**os.environ, "MILLRACE_AUTH": "off", "MILLRACE_DATA_DIR": data_dir, **extra_env}
    env.pop("MILLRACE_SEGMENTSTORE_PORT", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "millrace.ops.cli", "segmentstore", "--port", "0",
        "--containers", "2",
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


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_node_process_keeps_data_across_restart(tmp_path, loop: str) -> None:
    """On either event loop (``MILLRACE_EVENT_LOOP``): the pure-Python one stays served."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    process, port = await start_node_process(str(tmp_path), MILLRACE_EVENT_LOOP=loop)
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    await (await client.append_block(writer, [b"durable-1", b"durable-2"]))
    await client.close()
    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), 60) == 0

    process, port = await start_node_process(str(tmp_path), MILLRACE_EVENT_LOOP=loop)
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    assert await client.setup_append(SEG, writer) == 2
    data = (await client.read_segment(SEG, 0)).data
    assert data == b"\0\0\0\0\0\0\0\x09durable-1\0\0\0\0\0\0\0\x09durable-2"
    await client.close()
    process.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(process.wait(), 60) == 0
