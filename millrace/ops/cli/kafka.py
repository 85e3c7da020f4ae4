"""``millrace kafka groups``: the Kafka listeners and consumer groups (members, committed
offsets, lag in records), as the nodes last reported them, with each group's status and lag in
bytes and seconds as the lag round last judged them."""

from __future__ import annotations

import argparse
from typing import Any

from millrace.ops.cli import remote
from millrace.ops.cli.base import Parents, command


def register(commands: Any, parents: Parents) -> None:
    kafka = command(commands, "kafka", None, "Kafka's clients: listeners and consumer groups.",
                    parents=[parents.data_dir])  # fmt: skip
    verbs = kafka.add_subparsers(dest="verb", metavar="VERB", required=True)
    command(
        verbs, "groups", remote.handler(groups),
        "The Kafka listeners, and each consumer group's state, status, members and lag.",
        variables=remote.VARIABLES, parents=[parents.data_dir, remote.options()],
    )  # fmt: skip


def groups(args: argparse.Namespace) -> None:
    found = remote.admin(args, lambda a: a.kafka_groups())
    remote.out(args, found, "\n".join(group_lines(found)))


def group_lines(found: dict[str, Any]) -> list[str]:
    bootstrap = ",".join(str(x["bootstrap"]) for x in found["listeners"]) or "none reporting"
    lines = [f"listeners: {bootstrap}", ""]
    if not found["groups"]:
        return [*lines, "no consumer group"]
    for group in found["groups"]:
        members = len(group["members"])
        lines.append(f"group {group['group']}: {group['state']}, {members} member(s), lag"
                     f" {group['lag']} record(s)")  # fmt: skip
        if group.get("status"):
            sized = "?" if group["lagBytes"] is None else f"{group['lagBytes']:,}"
            lines.append(f"  status {group['status']} ({group['reason']}): {sized} byte(s),"
                         f" oldest {group['lagSeconds']:.1f} s")  # fmt: skip
        for member in group["members"]:
            lines.append(f"  member {member['member']} ({member['client']} at {member['host']})")
        lines.append(f"  {'TOPIC':<32} {'PARTITION':>9} {'COMMITTED':>10} {'END':>10} {'LAG':>8}")
        for p in group["partitions"]:
            end = "?" if p["end"] is None else p["end"]
            lag = "?" if p["lag"] is None else p["lag"]
            lines.append(f"  {p['topic']:<32} {p['partition']:>9} {p['committed']:>10}"
                         f" {end:>10} {lag:>8}")  # fmt: skip
    return lines
