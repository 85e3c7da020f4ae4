"""A segment store node: the engine plus the wire server, run until SIGTERM or SIGINT.

Responsibility: the composition of one ``millrace segmentstore`` process. ``main(argv)`` reads
the environment once (``millrace.kernel.config.SegmentStoreSettings``: ``MILLRACE_*`` variables, the
token secret persisted in the data directory), applies the command-line overrides, and runs
``run_node``, which builds the store with ``segment_app.engine.bootstrap``, starts it and the
server, prints where it listens, and on a signal stops the server first (no new requests), then
the store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from millrace.kernel.memory import keep_freed_memory
from millrace.kernel.status_files import node_status_path, write_status
from segment_app.engine.errors import EngineError
from segment_app.server.server import SegmentStoreServer, ServerConfig
from tiers.base import TierError

__all__ = ["NodeConfig", "main", "run_node"]

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


@dataclasses.dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything one segment store node is built from."""

    #: Interface the wire server listens on.
    host: str = "127.0.0.1"
    #: Wire server port (Pravega's 12345; 0 = any free port).
    port: int = 12345
    #: Root of the node's local state (file tier-1, filesystem tier-2).
    data_dir: str = "./data"
    #: Number of segment containers; fixed for the life of a cluster.
    container_count: int = 4
    #: Check delegation tokens on every request.
    auth_enabled: bool = True
    #: Secret the delegation tokens are signed with (required when ``auth_enabled``).
    token_secret: str = dataclasses.field(default="", repr=False)
    #: Tier-1 backend name (entry point of ``millrace.tier1``) or dotted path.
    tier1: str = "file"
    #: Keyword options of the tier-1 backend.
    tier1_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: Tier-2 backend name (entry point of ``millrace.tier2``) or dotted path.
    tier2: str = "filesystem"
    #: Keyword options of the tier-2 backend.
    tier2_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: How long a read at the tail of an open segment waits for data (under 30 s).
    read_tail_wait_seconds: float = 5.0
    #: Tier-2 flush thresholds (age, size) and the per-container cache size.
    tier2_flush_delay_ms: int = 10_000
    tier2_flush_bytes: int = 4 * 1024 * 1024
    cache_bytes: int = 512 * 1024 * 1024
    #: Bytes of each container's on-disk cache (0: none).
    cache_disk_bytes: int = 0
    #: Appends held back this long (the cache full of data waiting for tier-2) are refused.
    backlog_refuse_ms: int = 10_000
    #: Appends are refused while ``data_dir``'s filesystem is this full (percent; 100: never).
    disk_full_percent: int = 95
    #: TEST-ONLY protections switched off (``millrace.kernel.config.UNSAFE_TEST_FLAGS``); see
    #: ``_unsafe_settings``. Never set in production.
    unsafe: frozenset[str] = frozenset()
    #: Port of the metrics endpoint (``/metrics``, ``/traffic``); 0: none.
    metrics_port: int = 9092
    #: The traffic monitor's decision window (seconds).
    traffic_window_s: float = 120.0
    #: Whether the traffic monitor counts appends.
    traffic_monitor: bool = True

    def server_config(self) -> ServerConfig:
        return ServerConfig(
            host=self.host,
            port=self.port,
            auth_enabled=self.auth_enabled,
            token_secret=self.token_secret,
            read_tail_wait_seconds=self.read_tail_wait_seconds,
            traffic_window_s=self.traffic_window_s,
            traffic_monitor=self.traffic_monitor,
        )


def _build_store(config: NodeConfig) -> Any:
    from segment_app.engine.bootstrap import StoreSettings, build_segment_store
    from segment_app.engine.config import (
        ContainerConfig,
        DurableLogConfig,
        ReadIndexConfig,
        SegmentStoreConfig,
        StorageWriterConfig,
    )

    settings = StoreSettings(
        data_dir=config.data_dir,
        tier1=config.tier1,
        tier1_options=dict(config.tier1_options),
        tier2=config.tier2,
        tier2_options=dict(config.tier2_options),
        store=SegmentStoreConfig(
            container_count=config.container_count,
            container=ContainerConfig(
                durable_log=DurableLogConfig(refuse_after_ms=config.backlog_refuse_ms),
                read_index=ReadIndexConfig(
                    cache_bytes_max=config.cache_bytes,
                    disk_cache_bytes_max=config.cache_disk_bytes,
                ),
                storage_writer=StorageWriterConfig(
                    flush_bytes_min=config.tier2_flush_bytes,
                    flush_delay_ms=config.tier2_flush_delay_ms,
                ),
            ),
        ),
    )
    return build_segment_store(_unsafe_settings(settings, config.unsafe))


#: TEST-ONLY: the file tier-1 option each unsafe flag sets.
_UNSAFE_FILE_TIER1 = {
    "no-fsync": ("fsync", False),
    "no-fencing": ("fencing", False),
    "no-crc": ("verify_crc", False),
}


def _unsafe_settings(settings: Any, unsafe: frozenset[str]) -> Any:
    """TEST-ONLY: ``settings`` with the protections named in ``unsafe`` switched off.

    The acceptance tests run each whole-process test once this way to prove the test can fail
    (docs/components/guarantees.md). The file tier-1 and filesystem tier-2 options are set only
    when those backends are chosen.
    """
    if not unsafe:
        return settings
    log.warning(
        "UNSAFE TEST MODE (MILLRACE_TEST_UNSAFE=%s): protections are OFF; acknowledged data "
        "may be lost, duplicated, corrupted or written by a fenced node. Never use in production.",
        ",".join(sorted(unsafe)),
    )
    tier1, tier2 = dict(settings.tier1_options), dict(settings.tier2_options)
    if settings.tier1 == "file":
        tier1.update(_UNSAFE_FILE_TIER1[flag] for flag in unsafe if flag in _UNSAFE_FILE_TIER1)
    if settings.tier2 == "filesystem" and "no-fsync" in unsafe:
        tier2["fsync"] = False
    container = settings.store.container
    if "no-crc" in unsafe:
        durable_log = dataclasses.replace(container.durable_log, verify_crc=False)
        container = dataclasses.replace(container, durable_log=durable_log)
    if "no-dedup" in unsafe:
        container = dataclasses.replace(container, deduplicate=False)
    store = dataclasses.replace(settings.store, container=container)
    return dataclasses.replace(settings, tier1_options=tier1, tier2_options=tier2, store=store)


async def run_node(
    config: NodeConfig,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[SegmentStoreServer], None] | None = None,
) -> None:
    """Run until SIGTERM/SIGINT (or until ``stop`` is set); ``on_ready`` sees the server."""
    stop = stop or asyncio.Event()
    store = _build_store(config)
    server = SegmentStoreServer(store, config.server_config())  # checks the config first
    await store.start()
    try:
        await server.start()
        # What start-up built lives as long as the node: keep it out of the collector's full
        # passes (shorter pauses on the append and read paths).
        gc.collect()
        gc.freeze()
        try:
            print(
                f"Millrace segment store listening on {config.host}:{server.port} "
                f"(data dir {config.data_dir})",
                flush=True,
            )
            if on_ready is not None:
                on_ready(server)
            reporter = asyncio.create_task(_report_status(config, store, server.port))
            status: dict[str, Any] = {**store.health(), "metrics": store.metrics()}
            metrics = _start_metrics(config, server, lambda: status)
            try:
                with _stop_on_signals(stop):
                    while not stop.is_set():  # the traffic monitor's tick
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop.wait(), TRAFFIC_TICK_SECONDS)
                        server.traffic.tick()
                        status = {**store.health(), "metrics": store.metrics()}
            finally:
                reporter.cancel()
                if metrics is not None:
                    metrics.close()
        finally:
            await server.stop()
    finally:
        await store.stop()
    log.info("segment store stopped")


#: Seconds between two ticks of the traffic monitor.
TRAFFIC_TICK_SECONDS = 1.0


def _start_metrics(
    config: NodeConfig, server: SegmentStoreServer, health: Callable[[], dict[str, Any]]
) -> Any:
    """The metrics port, or ``None`` when it is off or cannot be bound (the node serves on;
    a warning says why)."""
    if not config.metrics_port:
        return None
    from segment_app.server.metrics import MetricsServer

    try:
        metrics = MetricsServer(
            config.host, config.metrics_port, server.traffic, health, server.authorizer
        )
    except OSError as exc:
        log.warning("no metrics on %s:%d: %s", config.host, config.metrics_port, exc)
        return None
    log.info("metrics on http://%s:%d/metrics", config.host, metrics.port)
    return metrics


#: Seconds between two writes of the node's status file.
STATUS_INTERVAL_SECONDS = 1.0


async def _report_status(config: NodeConfig, store: Any, port: int) -> None:
    """Every ``STATUS_INTERVAL_SECONDS``: the containers' states and epochs and the tiers'
    trouble (``SegmentStore.health``) as JSON in ``node_status_path``, replaced atomically. A health
    check on the same host reads it; its ``updated`` time tells a stale file from a live one."""
    path = node_status_path(config.data_dir, port)
    path.parent.mkdir(parents=True, exist_ok=True)
    guard = DiskGuard(config.data_dir, config.disk_full_percent, config.unsafe)
    if _tier2_on_data_disk(config):  # flushing copies what waits for tier-2 onto this disk
        guard.waiting_bytes = lambda: int(
            sum(c["tier2_lag_bytes"] for c in store.metrics().values())
        )
    watching = asyncio.create_task(guard.watch(store))
    try:
        await _report_every_second(config, store, port, path, guard)
    finally:
        watching.cancel()


async def _report_every_second(
    config: NodeConfig, store: Any, port: int, path: Path, guard: DiskGuard
) -> None:
    while True:
        report = {
            "pid": os.getpid(), "address": [config.host, port],
            "tier1": config.tier1, "tier2": config.tier2, "disk": guard.seen,
        }  # fmt: skip
        store.restart_failed()
        try:
            write_status(path, {**report, **store.health()})
        except OSError as exc:  # a full or read-only disk must not stop the node
            log.warning("cannot write the status file %s: %s", path, exc)
        await asyncio.sleep(STATUS_INTERVAL_SECONDS)


#: Seconds between two looks at the data directory's disk: the headroom under the limit must
#: take what the node writes in that time (a 5% headroom of a 1 GB disk: 500 MB/s).
DISK_CHECK_SECONDS = 0.1


def _tier2_on_data_disk(config: NodeConfig) -> bool:
    """Whether tier-2 keeps its chunks on the data directory's filesystem (its ``root``)."""
    from segment_app.engine.bootstrap import StoreSettings, tier2_options

    where = StoreSettings(data_dir=config.data_dir, tier2=config.tier2,
                          tier2_options=dict(config.tier2_options))  # fmt: skip
    root = tier2_options(where).get("root")
    try:
        return bool(root) and os.stat(root).st_dev == os.stat(config.data_dir).st_dev
    except OSError:
        return False


class DiskGuard:
    """Refuses appends while the data directory's filesystem is ``full_percent`` full (of its
    size, counting only the space this process may use, and the data still to be copied to a
    tier-2 on the same disk), and takes them again once it is below: the node never writes
    its disk to ENOSPC, so tier-1, the metadata database, the broker's files and the status
    files keep room to recover."""

    def __init__(self, data_dir: str, full_percent: int, unsafe: frozenset[str]) -> None:
        self.data_dir = data_dir
        # TEST-ONLY: no threshold, appends go on until the disk is full.
        self.full_percent = 100 if "no-disk-threshold" in unsafe else full_percent
        #: What the last look found (``check``'s answer).
        self.seen: dict[str, Any] = {}
        #: Bytes that will land on this disk without a new append (data waiting for a tier-2
        #: on the same disk): counted as used.
        self.waiting_bytes: Callable[[], int] = lambda: 0

    async def watch(self, store: Any) -> None:
        """``check`` every ``DISK_CHECK_SECONDS`` (a statvfs: about a microsecond)."""
        while True:
            self.seen = self.check(store)
            await asyncio.sleep(DISK_CHECK_SECONDS)

    def check(self, store: Any) -> dict[str, Any]:
        """Look at the disk, refuse or take appends; what was seen, for the status file."""
        try:
            fs = os.statvfs(self.data_dir)
        except OSError as exc:
            return {"path": self.data_dir, "error": str(exc)}
        size, free = fs.f_blocks * fs.f_frsize, fs.f_bavail * fs.f_frsize
        waiting = self.waiting_bytes()
        used = min(100.0 * (size - free + waiting) / size, 100.0) if size else 0.0
        refusing = self.full_percent < 100 and used >= self.full_percent
        reason = (
            f"appends refused: the disk of {self.data_dir} is {used:.1f}% full (the limit is"
            f" {self.full_percent}%, MILLRACE_DISK_FULL_PERCENT); free space and they resume"
        )
        if refusing and store.refusal is None:
            log.warning("%s", reason)
        elif not refusing and store.refusal is not None:
            log.warning("appends taken again: the disk of %s is %.1f%% full", self.data_dir, used)
        store.refuse_appends(reason if refusing else None)
        return {
            "path": self.data_dir, "usedPercent": round(used, 1), "freeBytes": free,
            "waitingForTier2Bytes": waiting,
            "limitPercent": self.full_percent, "refusing": refusing,
        }  # fmt: skip


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Any:
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="millrace segmentstore",
        description="Run a segment store node (wire protocol server and its containers). "
        "Other settings come from MILLRACE_* environment variables.",
    )
    parser.add_argument("--data-dir", help="root of local state (default $MILLRACE_DATA_DIR)")
    parser.add_argument("--host", help="interface to listen on")
    parser.add_argument("--port", type=int, help="wire protocol port (default 12345)")
    parser.add_argument("--containers", type=int, help="number of segment containers")
    parser.add_argument(
        "--read-tail-wait", type=float, help="seconds a tail read waits for data (default 5)"
    )
    return parser


def config_from(args: argparse.Namespace, environ: Mapping[str, str]) -> NodeConfig:
    """The node configuration: environment first, command-line options over it."""
    from millrace.kernel.config import SegmentStoreSettings

    env = dict(environ)
    if args.data_dir:
        env["MILLRACE_DATA_DIR"] = args.data_dir
    settings = SegmentStoreSettings.from_env(env)
    config = NodeConfig(
        host=args.host or settings.host,
        port=settings.port if args.port is None else args.port,
        data_dir=str(settings.data_dir),
        container_count=args.containers or settings.container_count,
        auth_enabled=settings.auth_enabled,
        token_secret=settings.token_secret,
        tier1=settings.tier1,
        tier1_options=dict(settings.tier1_options),
        tier2=settings.tier2,
        tier2_options=dict(settings.tier2_options),
        tier2_flush_delay_ms=settings.tier2_flush_delay_ms,
        tier2_flush_bytes=settings.tier2_flush_bytes,
        cache_bytes=settings.cache_bytes,
        backlog_refuse_ms=settings.backlog_refuse_ms,
        disk_full_percent=settings.disk_full_percent,
        cache_disk_bytes=settings.cache_disk_bytes,
        unsafe=settings.unsafe,
        metrics_port=settings.metrics_port,
        traffic_window_s=settings.autoscale_window_s,
        traffic_monitor=settings.traffic_monitor,
    )
    if args.read_tail_wait is not None:
        config = dataclasses.replace(config, read_tail_wait_seconds=args.read_tail_wait)
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """``millrace segmentstore``: returns the exit status (0 after a clean stop)."""
    args = _parser().parse_args(argv)
    try:
        config = config_from(args, os.environ)
        config.server_config()  # validates the server options
    except ValueError as exc:  # ConfigError is a ValueError
        print(f"millrace segmentstore: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    keep_freed_memory()
    try:
        asyncio.run(run_node(config))
    except (OSError, ValueError, TierError, EngineError) as exc:
        # e.g. a corrupt tier-1 record: the message names the file and the offset.
        print(f"millrace segmentstore: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK
