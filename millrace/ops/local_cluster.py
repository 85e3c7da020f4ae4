"""``millrace cluster local``: a cluster of processes on loopback, for trying it on one machine.

Responsibility: start, on the metadata database of ``DATABASE_URL``, ``nodes`` segment store
nodes (``millrace segmentstore --advertise 127.0.0.1:<port>``, each with a data directory of
its own under the cluster's, all sharing one file tier-1 root and one filesystem tier-2 root
there, unless the tier variables say otherwise), ``controllers`` controllers (each may lead),
a Celery worker and two beats (one ticks, the other stands by), and supervise them as the
standalone does (``millrace.ops.standalone.Supervisor``: a child that exits is restarted).
Every child gets the cluster's token secret and Django key in its environment, so what one
signs another accepts. Ctrl-C or SIGTERM stops them all; the nodes leave the cluster as they go.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from millrace.kernel.config import SegmentStoreSettings, TlsSettings, WebSettings
from millrace.kernel.tls import peer_context
from millrace.ops.standalone import (
    Child,
    cli_argv,
    ensure_admin,
    ensure_port_free,
    heartbeat_fresh,
    http_ok,
    supervise,
    wire_answers,
)

__all__ = ["Ports", "cluster_environment", "plan_ports", "run"]


@dataclasses.dataclass(frozen=True)
class Ports:
    """Every port of the local cluster: each controller's HTTP and gRPC ports (gRPC 0: none),
    each node's wire, Kafka and metrics ports (Kafka and metrics 0: none), all different."""

    http: list[int]
    grpc: list[int]
    wire: list[int]
    metrics: list[int]
    kafka: list[int]


def plan_ports(
    http_port: int, grpc_port: int, wire_port: int, nodes: int, controllers: int,
    metrics_port: int = 0, kafka_port: int = 0,
) -> Ports:  # fmt: skip
    """Each role's ports counted up from its first one, skipping any port another role took,
    the nodes' Kafka ports first (so that the first is Kafka's 9092): with the defaults the
    Kafka ports are 9092-9094, the controllers' HTTP ports 9091 and 9095, their gRPC ports
    9090 and 9096, and the nodes' metrics ports 9097-9099."""
    taken: set[int] = set()

    def count_up(first: int, many: int) -> list[int]:
        found, port = [], first
        while len(found) < many:
            if port > 65535:
                raise ValueError(f"no {many} free port numbers from {first} up")
            if port not in taken:
                found.append(port)
                taken.add(port)
            port += 1
        return found

    kafka = count_up(kafka_port, nodes) if kafka_port else [0] * nodes
    http = count_up(http_port, controllers)
    grpc = count_up(grpc_port, controllers) if grpc_port else [0] * controllers
    wire = count_up(wire_port, nodes)
    metrics = count_up(metrics_port, nodes) if metrics_port else [0] * nodes
    return Ports(http, grpc, wire, metrics, kafka)


def cluster_environment(data_dir: Path, store: SegmentStoreSettings) -> dict[str, str]:
    """What every child of the local cluster gets in its environment besides the caller's."""
    shared = data_dir / "shared"
    env = {
        "MILLRACE_TOKEN_SECRET": store.token_secret,
        "MILLRACE_TOKEN_KEYRING_FILE": str(store.token_keyring),
        "MILLRACE_SECRET_KEY": WebSettings.from_env().secret_key,
    }
    if store.tier1 == "file" and "root" not in store.tier1_options:
        options = {**store.tier1_options, "root": str(shared / "tier1")}
        env["MILLRACE_TIER1_OPTIONS"] = json.dumps(options)
    if store.tier2 == "filesystem" and "root" not in store.tier2_options:
        options = {**store.tier2_options, "root": str(shared / "tier2")}
        env["MILLRACE_TIER2_OPTIONS"] = json.dumps(options)
    return env


def _children(data_dir: Path, ports: Ports) -> list[Child]:
    tls = peer_context(TlsSettings.from_env())  # (each child serves TLS when it is on)
    scheme = "https" if tls else "http"
    children = []
    for i, (port, metrics, kafka) in enumerate(
        zip(ports.wire, ports.metrics, ports.kafka, strict=True)
    ):
        children.append(Child(
            f"node-{i}",
            cli_argv("segmentstore", "--data-dir", str(data_dir / f"node-{i}"), "--port", str(port),
                 "--metrics-port", str(metrics), "--kafka-port", str(kafka),
                 "--advertise", f"127.0.0.1:{port}", "--node-id", f"node-{i}"),
            wire_answers("127.0.0.1", port, tls),
        ))  # fmt: skip
    for name, argv in (("worker", ["--concurrency", "2"]), ("beat-0", []), ("beat-1", [])):
        role = name.split("-")[0]
        extra = ["--schedule", str(data_dir / f"{name}-schedule")] if role == "beat" else []
        argv = cli_argv(role, "--data-dir", str(data_dir), *argv, *extra)
        child = Child(name, argv, lambda: False)
        child.ready = heartbeat_fresh(role, child)
        children.append(child)
    for i, (port, grpc) in enumerate(zip(ports.http, ports.grpc, strict=True)):
        children.append(Child(
            f"controller-{i}",
            cli_argv("controller", "--data-dir", str(data_dir), "--http-port", str(port),
                 "--grpc-port", str(grpc)),
            http_ok(f"{scheme}://127.0.0.1:{port}/health/liveness", tls),
        ))  # fmt: skip
    return children


def run(
    *,
    data_dir: Path,
    store: SegmentStoreSettings,
    nodes: int,
    controllers: int,
    http_port: int,
    grpc_port: int = 0,
) -> int:
    """Run the local cluster until SIGINT or SIGTERM; the exit status. Every port is planned
    (``plan_ports``) and checked free before anything starts."""
    ports = plan_ports(
        http_port, grpc_port, store.port, nodes, controllers, store.metrics_port, store.kafka_port
    )
    for i, (wire, metrics, kafka) in enumerate(
        zip(ports.wire, ports.metrics, ports.kafka, strict=True)
    ):
        ensure_port_free(f"node-{i}", "127.0.0.1", wire, "--segmentstore-port")
        if kafka:
            ensure_port_free(f"node-{i}", "127.0.0.1", kafka, "MILLRACE_KAFKA_PORT")
        if metrics:
            ensure_port_free(
                f"node-{i}", "127.0.0.1", metrics, "MILLRACE_SEGMENTSTORE_METRICS_PORT"
            )
    for i, (http, grpc) in enumerate(zip(ports.http, ports.grpc, strict=True)):
        ensure_port_free(f"controller-{i}", "127.0.0.1", http, "--http-port")
        if grpc:
            ensure_port_free(f"controller-{i}", "127.0.0.1", grpc, "--grpc-port")
    token, password, first = ensure_admin(data_dir)
    os.environ.update(cluster_environment(data_dir, store))
    return supervise(
        "millrace cluster local",
        _children(data_dir, ports),
        data_dir,
        store.unsafe,
        lambda: _print_ready(data_dir, ports, token, password, first),
    )


def _print_ready(data_dir: Path, ports: Ports, token: str, password: str, first: bool) -> None:
    urls = ", ".join(f"http://127.0.0.1:{port}/" for port in ports.http)
    grpc = ", ".join(f"tcp://127.0.0.1:{port}" for port in ports.grpc if port)
    wire = ", ".join(map(str, ports.wire))
    lines = [
        "",
        "The local cluster is running. Ctrl-C stops it.",
        f"  controllers   {urls}  (REST under /v1/, the console, WebSockets; any of them)",
        *([f"  gRPC          {grpc}  (Pravega's clients; any of them)"] if grpc else []),
        f"  nodes         {len(ports.wire)} segment store nodes on 127.0.0.1, ports {wire}"
        + (f" (metrics {', '.join(map(str, ports.metrics))})" if any(ports.metrics) else ""),
        *(
            [
                "  Kafka         bootstrap.servers="
                + ",".join(f"127.0.0.1:{port}" for port in ports.kafka)
            ]
            if any(ports.kafka)
            else []
        ),
        f"  credentials   {data_dir / 'admin-token'} (API token), "
        f"{data_dir / 'admin-password'} (console password)",
        f"  try:          millrace cluster status --data-dir {data_dir}"
        f" --url http://127.0.0.1:{ports.http[0]}",
    ]
    if first and sys.stdout.isatty():  # (never into a journal or a log file)
        lines += [f"  admin token   {token}", f"  admin password {password}"]
    print("\n".join(lines) + "\n", flush=True)
