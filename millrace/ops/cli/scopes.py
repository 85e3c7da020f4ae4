"""``millrace scope create|list|delete``."""

from __future__ import annotations

import argparse
from typing import Any

from millrace.ops.cli import remote
from millrace.ops.cli.base import Parents, command


def register(commands: Any, parents: Parents) -> None:
    scope = command(commands, "scope", None, "Create, list and delete scopes.",
                    parents=[parents.data_dir])  # fmt: skip
    verbs = scope.add_subparsers(dest="verb", metavar="VERB", required=True)
    common = [parents.data_dir, remote.options()]
    for verb, action, summary in (
        ("create", scope_create, "Create a scope."),
        ("delete", scope_delete, "Delete an empty scope."),
    ):
        command(verbs, verb, remote.handler(action), summary, variables=remote.VARIABLES,
                parents=common).add_argument("name")  # fmt: skip
    command(verbs, "list", remote.handler(scope_list), "List scopes.",
            variables=remote.VARIABLES, parents=common)  # fmt: skip


def scope_create(args: argparse.Namespace) -> None:
    made = remote.call(args, "POST", "/scopes", {"scopeName": args.name}, exists_ok=True)
    if made is None:
        remote.out(args, {"scopeName": args.name, "created": False}, f"{args.name} exists already")
    else:
        remote.out(args, made, f"created {args.name}")


def scope_list(args: argparse.Namespace) -> None:
    found = remote.call(args, "GET", "/scopes")
    remote.out(args, found, "\n".join(s["scopeName"] for s in found["scopes"]))


def scope_delete(args: argparse.Namespace) -> None:
    remote.call(args, "DELETE", f"/scopes/{args.name}")
    remote.out(args, {"deleted": args.name}, f"deleted {args.name}")
