"""``millrace cluster status``: the cluster's nodes, containers, leader and latest moves;
``millrace cluster local``: a cluster on loopback, for trying it."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from millrace.kernel import logs
from millrace.kernel.config import (
    GRPC_PORT,
    HTTP_PORT,
    LogSettings,
    SegmentStoreSettings,
    WebSettings,
    variables,
)
from millrace.ops.cli import remote
from millrace.ops.cli.base import (
    EXIT_USAGE,
    CommandError,
    Parents,
    command,
    migrate,
    millrace_version,
    needs,
    port,
)

#: Moves the text output lists (``--json`` has all the node answers).
MOVES_PRINTED = 10


def register(commands: Any, parents: Parents) -> None:
    cluster = command(commands, "cluster", None, "Show the cluster.", parents=[parents.data_dir])
    verbs = cluster.add_subparsers(dest="verb", metavar="VERB", required=True)
    local = command(
        verbs, "local", run_local,
        "Run a cluster on loopback for trying it: segment store nodes, controllers, a worker and "
        "two beats, supervised, on the PostgreSQL of DATABASE_URL.",
        variables=variables(SegmentStoreSettings), parents=[parents.data_dir, parents.log_level],
    )  # fmt: skip
    local.add_argument("--nodes", type=int, default=3, metavar="N", help="segment store nodes (3)")
    local.add_argument("--controllers", type=int, default=2, metavar="N", help="controllers (2)")
    local.add_argument(
        "--http-port", type=port, default=HTTP_PORT, metavar="PORT",
        help=f"the first controller's HTTP port (default {HTTP_PORT}; the next ones follow)",
    )  # fmt: skip
    local.add_argument(
        "--grpc-port", type=int, default=GRPC_PORT, metavar="PORT",
        help=f"the first controller's gRPC port (default {GRPC_PORT}; the next ones follow;"
        " 0: none)",
    )  # fmt: skip
    local.add_argument(
        "--segmentstore-port", type=port, default=None, metavar="PORT",
        help="the first node's wire port (default $MILLRACE_SEGMENTSTORE_PORT or 12345)",
    )  # fmt: skip
    command(
        verbs, "status", remote.handler(cluster_status),
        "Nodes (session age, health, containers), the leader and the latest container moves.",
        variables=remote.VARIABLES, parents=[parents.data_dir, remote.options()],
    )  # fmt: skip


def cluster_status(args: argparse.Namespace) -> None:
    found = remote.admin(args, lambda a: a.cluster())
    remote.out(args, found, "\n".join(status_lines(found)))


def status_lines(found: dict[str, Any]) -> list[str]:
    leader = found["leader"]
    lines = [
        f"leader: {leader['node']} (term {leader['term']})" if leader else "leader: none",
        f"containers: {found['containerCount']}; session timeout"
        f" {found['sessionTimeoutSeconds']} s",
        "",
        f"{'NODE':<28} {'ROLE':<14} {'ADDRESS':<28} {'SESSION':<8} {'AGE':>7}  CONTAINERS",
    ]
    for node in found["nodes"]:
        age = node["sessionAgeSeconds"]
        state = node["session"] if node["live"] or node["session"] != "live" else "expired"
        lines.append(
            f"{node['nodeId']:<28} {node['role']:<14} {node['address']:<28}"
            f" {state:<8} {'-' if age is None else f'{age:.1f}s':>7}"
            f"  {','.join(map(str, node['containers'])) or '-'}"
        )
    if found["moves"]:
        lines += ["", "latest moves:"]
        for move in found["moves"][:MOVES_PRINTED]:
            lines.append(
                f"  {move['at']}  container {move['container']}: {move['from'] or '-'} ->"
                f" {move['to']} (epoch {move['epoch']}, {move['reason']})"
            )
    return lines


def run_local(args: argparse.Namespace, rest: list[str]) -> int:
    if not 1 <= args.nodes <= 16 or not 1 <= args.controllers <= 8:
        raise CommandError("give 1 to 16 --nodes and 1 to 8 --controllers", EXIT_USAGE)
    store = SegmentStoreSettings.from_env()
    if args.segmentstore_port is not None:
        store = dataclasses.replace(store, port=args.segmentstore_port)
    if WebSettings.from_env().database_url is None:
        raise CommandError(
            "a cluster shares one metadata database: set DATABASE_URL to a PostgreSQL database "
            "(e.g. postgres://postgres@127.0.0.1:5432/millrace)", EXIT_USAGE,
        )  # fmt: skip
    logs.configure(LogSettings.from_env())
    needs("django", "the cluster")
    migrate(verbosity=0)
    from millrace.ops import local_cluster
    from millrace.ops.standalone import StandaloneError

    print(f"millrace cluster local {millrace_version()}: data directory {store.data_dir}; "
          f"{args.nodes} nodes, {args.controllers} controllers", flush=True)  # fmt: skip
    try:
        return local_cluster.run(
            data_dir=store.data_dir, store=store, nodes=args.nodes,
            controllers=args.controllers, http_port=args.http_port, grpc_port=args.grpc_port,
        )  # fmt: skip
    except StandaloneError as exc:  # (a port in use: before anything started)
        raise CommandError(str(exc)) from None
