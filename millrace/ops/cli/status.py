"""``millrace status``: the node's health, part by part."""

from __future__ import annotations

import argparse
import json
from typing import Any

from millrace.kernel.config import ClientSettings
from millrace.ops.cli import remote
from millrace.ops.cli.base import CommandError, Parents, command


def register(commands: Any, parents: Parents) -> None:
    node_status = command(
        commands, "status", run_status, "Show the node's health, part by part.",
        variables=[v for v in remote.VARIABLES if v.name == "MILLRACE_URL"],
    )  # fmt: skip
    node_status.add_argument(
        "--url",
        help="the node, or several controllers separated by commas (default $MILLRACE_URL or"
        f" {ClientSettings.url})",
    )
    node_status.add_argument("--json", action="store_true", help="the health tree as JSON")
    node_status.add_argument(
        "--ca", metavar="FILE",
        help="CA file an https:// node is verified with (default $MILLRACE_TLS_CA_FILE)",
    )  # fmt: skip


def run_status(args: argparse.Namespace, rest: list[str]) -> int:
    """The node's health tree; exit status 0 when UP, 1 otherwise."""
    import httpx  # (when the command runs: ``millrace --help`` stays fast)

    failures = []
    for url in remote.urls(args):  # (several: the first that answers)
        try:
            tree = httpx.get(f"{url}/health", timeout=10, verify=remote.verify(args)).json()
            break
        except (httpx.HTTPError, ValueError) as exc:
            failures.append(_why(exc, url) or f"cannot reach {url}: {exc}")
    else:
        raise CommandError("; ".join(failures))
    if args.json:
        print(json.dumps(tree, indent=2))
    else:
        print("\n".join(_health_lines(tree, url)))
    return 0 if tree.get("status") == "UP" else 1


def _why(exc: BaseException, url: str) -> str | None:
    """What TLS has to do with ``exc``, said as every other command says it (``None``: it is
    not TLS: the node is down, say)."""
    import asyncio

    import httpx

    from millrace.client.controller import http_tls_refusal

    parsed = httpx.URL(url)
    where = f"the node at {url}"
    return asyncio.run(http_tls_refusal(exc, parsed, where, tls=parsed.scheme == "https"))


def _health_lines(tree: dict[str, Any], url: str) -> list[str]:
    ready = "ready" if tree["readiness"] else "NOT READY for writes"
    down = tree["details"].get("down")
    lines = [f"millrace at {url}: {tree['status']}, {ready}" + (f" (down: {down})" if down else "")]
    width = max((len(name) for name in tree["children"]), default=0)

    def add(node: dict[str, Any], indent: str) -> None:
        mark = {"UP": "ok", "DOWN": "!!"}.get(node["status"], "??")
        details = ", ".join(f"{k}: {v}" for k, v in node["details"].items())
        lines.append(f"{indent}{mark} {node['name']:<{width}}  {node['status']:<7} {details}")
        for child in node["children"].values():
            add(child, indent + "   ")

    for child in tree["children"].values():
        add(child, "  ")
    return lines
