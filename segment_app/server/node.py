"""A segment store node: the engine plus the wire server, run until SIGTERM or SIGINT.

Responsibility: the composition of one ``millrace segmentstore`` process. It takes the node's
settings, read once by the command line (``millrace.kernel.config.SegmentStoreSettings``: the
``MILLRACE_*`` variables with the command-line options over them), and gives the wire server and
the engine each their part (``server_config``, ``store_settings``). ``run_node`` builds the store
with ``segment_app.engine.bootstrap``, starts it and the server, prints where it listens, and on
a signal stops the server first (no new requests), then the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from millrace.kernel import logs
from millrace.kernel.config import LogSettings, SegmentStoreSettings, TlsSettings
from millrace.kernel.event_loop import event_loop_factory
from millrace.kernel.kafka_topics import KafkaCatalog
from millrace.kernel.membership import Membership, NodeCard
from millrace.kernel.memory import keep_freed_memory
from millrace.kernel.quotas import QuotaSource
from millrace.kernel.schema_policy import SchemaPolicies
from millrace.kernel.status_files import node_status_path, write_status
from millrace.kernel.tls import CertificateReloader, server_context
from segment_app.engine.bootstrap import StoreSettings, build_segment_store, tier2_options
from segment_app.engine.config import (
    ContainerConfig,
    DurableLogConfig,
    ReadIndexConfig,
    SegmentStoreConfig,
    StorageWriterConfig,
)
from segment_app.engine.errors import EngineError
from segment_app.engine.store import SegmentStore
from segment_app.kafka.context import KafkaSettings
from segment_app.kafka.server import KafkaServer
from segment_app.server.membership import NodeSession
from segment_app.server.metrics import MetricsServer
from segment_app.server.quotas import ScopeThrottles, exchange_loop
from segment_app.server.schema_guard import SchemaGuard
from segment_app.server.server import SegmentStoreServer
from segment_app.server.services import ServerConfig
from tiers.base import TierError

__all__ = ["run_node", "serve", "server_config", "store_settings"]

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def server_config(settings: SegmentStoreSettings) -> ServerConfig:
    """The wire server's part of the node's settings (a bad value raises ``ValueError``)."""
    return ServerConfig(
        host=settings.host,
        port=settings.port,
        auth_enabled=settings.auth_enabled,
        token_secret=settings.token_secret,
        token_keyring=settings.token_keyring,
        token_overlap="no-token-overlap" not in settings.unsafe,
        read_tail_wait_seconds=settings.read_tail_wait_seconds,
        autoscale_window_s=settings.autoscale_window_s,
        traffic_monitor=settings.traffic_monitor,
    )


def store_settings(settings: SegmentStoreSettings) -> StoreSettings:
    """The engine's part of the node's settings: where and how it stores data."""
    return StoreSettings(
        data_dir=str(settings.data_dir),
        tier1=settings.tier1,
        tier1_options=dict(settings.tier1_options),
        tier2=settings.tier2,
        tier2_options=dict(settings.tier2_options),
        store=SegmentStoreConfig(
            container_count=settings.container_count,
            container=ContainerConfig(
                durable_log=DurableLogConfig(refuse_after_ms=settings.backlog_refuse_ms),
                read_index=ReadIndexConfig(
                    cache_bytes_max=settings.cache_bytes,
                    disk_cache_bytes_max=settings.cache_disk_bytes,
                ),
                storage_writer=StorageWriterConfig(
                    flush_bytes_min=settings.tier2_flush_bytes,
                    flush_delay_ms=settings.tier2_flush_delay_ms,
                ),
            ),
        ),
    )


def _build_store(settings: SegmentStoreSettings) -> SegmentStore:
    return build_segment_store(_unsafe_settings(store_settings(settings), settings.unsafe))


#: TEST-ONLY: the file tier-1 option each unsafe flag sets.
_UNSAFE_FILE_TIER1 = {
    "no-fsync": ("fsync", False),
    "no-fencing": ("fencing", False),
    "no-crc": ("verify_crc", False),
}


def _unsafe_settings(settings: StoreSettings, unsafe: frozenset[str]) -> StoreSettings:
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
    config: SegmentStoreSettings,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[SegmentStoreServer], None] | None = None,
    membership: Membership | None = None,
    tls: TlsSettings | None = None,
    schema_policies: SchemaPolicies | None = None,
    quota_source: QuotaSource | None = None,
    kafka_catalog: KafkaCatalog | None = None,
) -> None:
    """Run until SIGTERM/SIGINT (or until ``stop`` is set); ``on_ready`` sees the server.
    With ``config.advertise``, the node joins the cluster through ``membership`` and serves
    the containers its leader assigns; without, it serves every container. With ``tls``
    enabled, the wire and metrics ports serve TLS with a certificate re-read when its files
    change. Appends are held to their streams' schemas and scopes' quotas (``_guard_appends``).
    With ``kafka_catalog``, the node serves Kafka's clients too (``config.kafka_port``)."""
    stop = stop or asyncio.Event()
    if config.advertise is not None and membership is None:
        raise ValueError("MILLRACE_ADVERTISE is set: the node needs the cluster's database")
    store = _build_store(config)
    store.clustered = config.advertise is not None
    store.wrong_host = "no-wrong-host" not in config.unsafe  # (TEST-ONLY switch)
    context = server_context(tls) if tls is not None and tls.enabled else None
    reloader = CertificateReloader(context, tls).start() if context and tls else None
    server = SegmentStoreServer(store, server_config(config), tls=context)  # checks the config
    server.tables.check_versions = "no-table-versions" not in config.unsafe  # (TEST-ONLY switch)
    _guard_appends(server, schema_policies, quota_source)
    await store.start()
    try:
        await server.start()
        # What start-up built lives as long as the node: keep it out of the collector's full
        # passes (shorter pauses on the append and read paths).
        gc.collect()
        gc.freeze()
        try:
            kafka = await _start_kafka(config, store, kafka_catalog, context, server)
            _print_listening(config, server, kafka)
            if on_ready is not None:
                on_ready(server)
            guard = DiskGuard(str(config.data_dir), config.disk_full_percent, config.unsafe)
            reporter = asyncio.create_task(_report_status(config, store, server.port, guard))
            quotas = _exchange_quotas(config, server, quota_source)

            status = _status_now(store, guard)
            cert = tls.cert_file if context is not None and tls is not None else None
            metrics = _start_metrics(config, server, lambda: status, cert)
            session = None
            if membership is not None and config.advertise is not None:
                card = node_card(config, server.port, metrics.port if metrics else None)
                card = dataclasses.replace(card, tls=context is not None)
                session = asyncio.create_task(NodeSession(
                    membership, card, store, session_timeout_s=config.session_timeout_s,
                    pause_check="no-pause-check" not in config.unsafe,
                ).run())  # fmt: skip
            try:
                with _stop_on_signals(stop):
                    while not stop.is_set():  # the traffic monitor's tick
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop.wait(), TRAFFIC_TICK_SECONDS)
                        server.traffic.tick()
                        status = _status_now(store, guard)
            finally:
                for task in (reporter, quotas):
                    if task is not None:
                        task.cancel()
                if session is not None:  # leaves the cluster: the leader moves on at once
                    session.cancel()
                    await asyncio.gather(session, return_exceptions=True)
                if metrics is not None:
                    metrics.close()
                if kafka is not None:
                    await kafka.stop()
        finally:
            await server.stop()
    finally:
        await store.stop()
        if reloader is not None:
            reloader.stop()
    log.info("segment store stopped")


def _status_now(store: Any, guard: DiskGuard) -> dict[str, Any]:
    """What the metrics port reads (replaced whole at each tick of the event loop)."""
    return {**store.health(), "metrics": store.metrics(), "disk": guard.seen,
            "tickedAt": time.monotonic()}  # fmt: skip


def node_card(config: SegmentStoreSettings, port: int, metrics_port: int | None) -> NodeCard:
    """What this node tells the cluster: ``MILLRACE_ADVERTISE``'s address (its port, when it
    names none, the one the server bound) and its id (``MILLRACE_NODE_ID``, else that address)."""
    assert config.advertise is not None
    host, _, advertised = config.advertise.rpartition(":")
    if not host:  # host only
        host, advertised = config.advertise, ""
    address = f"{host}:{advertised or port}"
    return NodeCard(
        node_id=config.node_id or address, host=host, port=int(advertised or port),
        metrics_port=metrics_port, container_count=config.container_count,
    )  # fmt: skip


#: Seconds between two ticks of the traffic monitor.
TRAFFIC_TICK_SECONDS = 1.0


def _print_listening(
    config: SegmentStoreSettings, server: SegmentStoreServer, kafka: KafkaServer | None
) -> None:
    print(
        f"Millrace segment store listening on {'tls://' if server.tls else ''}"
        f"{config.host}:{server.port} (data dir {config.data_dir})"
        + (f"; Kafka's clients: bootstrap.servers={_advertised_host(config)}:{kafka.port}"
           if kafka is not None else ""),
        flush=True,
    )  # fmt: skip


def _advertised_host(config: SegmentStoreSettings) -> str:
    """The host clients reach this node at (its advertised address's, else its own)."""
    if config.advertise:
        return config.advertise.rsplit(":", 1)[0]
    return "127.0.0.1" if config.host in ("0.0.0.0", "", "::") else config.host


async def _start_kafka(
    config: SegmentStoreSettings,
    store: SegmentStore,
    catalog: KafkaCatalog | None,
    tls: Any,
    wire: SegmentStoreServer,
) -> KafkaServer | None:
    """The Kafka listener (``config.kafka_port``; none without the metadata database), holding
    produces to the same schemas and quotas as the wire server's appends. A port that is taken
    stops the start (``OSError``), as the wire port does."""
    if catalog is None or not config.kafka_port:
        return None
    settings = KafkaSettings(
        host=config.host, port=config.kafka_port, advertised_host=_advertised_host(config),
        auth_enabled=config.auth_enabled, scope=config.kafka_scope,
        auto_create=config.kafka_auto_create, partitions=config.kafka_partitions,
        node_name=(node_card(config, wire.port, None).node_id if config.advertise
                   else f"{_advertised_host(config)}:{wire.port}"),
        clustered=config.advertise is not None, container_count=config.container_count,
    )  # fmt: skip
    kafka = KafkaServer(
        store, settings, catalog, tls=tls, schema_guard=wire.schema_guard, quotas=wire.quotas
    )
    try:
        await kafka.start()
    except OSError as exc:
        raise OSError(
            f"the Kafka port {config.host}:{config.kafka_port} cannot be listened on ({exc}): "
            "set MILLRACE_KAFKA_PORT (or --kafka-port) to a free port, or 0 for none"
        ) from None
    return kafka


def _start_metrics(
    config: SegmentStoreSettings,
    server: SegmentStoreServer,
    health: Callable[[], dict[str, Any]],
    certificate: str | None,
) -> Any:
    """The metrics port, or ``None`` when it is off. A port that is taken stops the start
    (``OSError`` naming the setting), as every other port does."""
    if not config.metrics_port:
        return None
    try:
        metrics = MetricsServer(
            config.host, config.metrics_port, server.traffic, health, server.authorizer,
            tls=server.tls, certificate=certificate,
        )  # fmt: skip
    except OSError as exc:
        raise OSError(
            f"the metrics port {config.host}:{config.metrics_port} cannot be listened on "
            f"({exc}): set MILLRACE_SEGMENTSTORE_METRICS_PORT (or --metrics-port) to a free "
            "port, or 0 for none"
        ) from None
    scheme = "https" if server.tls else "http"
    log.info("metrics on %s://%s:%d/metrics", scheme, config.host, metrics.port)
    return metrics


#: Seconds between two writes of the node's status file.
STATUS_INTERVAL_SECONDS = 1.0


async def _report_status(
    config: SegmentStoreSettings, store: Any, port: int, guard: DiskGuard
) -> None:
    """Every ``STATUS_INTERVAL_SECONDS``: the containers' states and epochs and the tiers'
    trouble (``SegmentStore.health``) as JSON in ``node_status_path``, replaced atomically. A health
    check on the same host reads it; its ``updated`` time tells a stale file from a live one."""
    path = node_status_path(config.data_dir, port)
    path.parent.mkdir(parents=True, exist_ok=True)
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
    config: SegmentStoreSettings, store: Any, port: int, path: Path, guard: DiskGuard
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


def _tier2_on_data_disk(config: SegmentStoreSettings) -> bool:
    """Whether tier-2 keeps its chunks on the data directory's filesystem (its ``root``)."""
    root = tier2_options(store_settings(config)).get("root")
    try:
        return root is not None and os.stat(root).st_dev == os.stat(config.data_dir).st_dev
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


def _guard_appends(
    server: SegmentStoreServer,
    schema_policies: SchemaPolicies | None,
    quota_source: QuotaSource | None,
) -> None:
    """Appends held to their streams' schemas and their scopes' quotas (before the server
    takes its first connection: each connection reads them when it is made)."""
    if schema_policies is not None:
        server.schema_guard = SchemaGuard(schema_policies)
    if quota_source is not None:
        server.quotas = server.requests.quotas = ScopeThrottles()


def _exchange_quotas(
    config: SegmentStoreSettings, server: SegmentStoreServer, source: QuotaSource | None
) -> asyncio.Task[None] | None:
    """The task that trades this node's measured demand for its quota allowances."""
    if source is None or server.quotas is None:
        return None
    node = config.node_id or f"{config.host}:{server.port}"
    return asyncio.create_task(exchange_loop(node, server.quotas, source))


def serve(
    settings: SegmentStoreSettings,
    log: LogSettings | None = None,
    membership: Membership | None = None,
    tls: TlsSettings | None = None,
    schema_policies: SchemaPolicies | None = None,
    quota_source: QuotaSource | None = None,
    kafka_catalog: KafkaCatalog | None = None,
) -> int:
    """Run a node of ``settings`` until SIGTERM or SIGINT (``millrace segmentstore``), logging
    as ``log`` says (``None``: as the process already does); the exit status: 0 after a clean
    stop, 1 when it cannot go on, 2 when a setting is wrong."""
    try:
        server_config(settings)  # checks the server's options before anything starts
        loop_factory = event_loop_factory()
    except ValueError as exc:
        print(f"millrace segmentstore: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if log is not None:
        logs.configure(log)
    keep_freed_memory()
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(run_node(settings, membership=membership, tls=tls,
                                schema_policies=schema_policies,
                                quota_source=quota_source,
                                kafka_catalog=kafka_catalog))  # fmt: skip
    except (OSError, ValueError, TierError, EngineError) as exc:
        # e.g. a corrupt tier-1 record: the message names the file and the offset.
        print(f"millrace segmentstore: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK
