"""``millrace cluster status``: the cluster's nodes, containers, leader and latest moves."""

from __future__ import annotations

import argparse
from typing import Any

from millrace.ops.cli import remote
from millrace.ops.cli.base import Parents, command

#: Moves the text output lists (``--json`` has all the node answers).
MOVES_PRINTED = 10


def register(commands: Any, parents: Parents) -> None:
    cluster = command(commands, "cluster", None, "Show the cluster.", parents=[parents.data_dir])
    verbs = cluster.add_subparsers(dest="verb", metavar="VERB", required=True)
    command(
        verbs, "status", remote.handler(cluster_status),
        "Nodes (session age, health, containers), the leader and the latest container moves.",
        variables=remote.VARIABLES, parents=[parents.data_dir, remote.options()],
    )  # fmt: skip


def cluster_status(args: argparse.Namespace) -> None:
    found = remote.call(args, "GET", "/cluster")
    remote.out(args, found, "\n".join(status_lines(found)))


def status_lines(found: dict[str, Any]) -> list[str]:
    leader = found["leader"]
    lines = [
        f"leader: {leader['holder']} (term {leader['term']})" if leader else "leader: none",
        f"containers: {found['containerCount']}; session timeout"
        f" {found['sessionTimeoutSeconds']} s",
        "",
        f"{'NODE':<28} {'ROLE':<14} {'ADDRESS':<22} {'SESSION':<8} {'AGE':>7}  CONTAINERS",
    ]
    for node in found["nodes"]:
        age = node["sessionAgeSeconds"]
        state = node["session"] if node["live"] or node["session"] != "live" else "expired"
        lines.append(
            f"{node['nodeId']:<28} {node['role']:<14} {node['host'] + ':' + str(node['port']):<22}"
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
