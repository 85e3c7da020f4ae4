"""``millrace scope create|list|delete|quota``."""

from __future__ import annotations

import argparse
from typing import Any

from millrace.kernel.quotas import QUOTA_LIMITS, limit_value
from millrace.ops.cli import remote
from millrace.ops.cli.base import EXIT_USAGE, CommandError, Parents, command


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
    quota = command(
        verbs, "quota", remote.handler(scope_quota),
        "Show a scope's quota and its use; with options, set limits (the admin role; 0 removes "
        "one).", variables=remote.VARIABLES, parents=common,
    )  # fmt: skip
    quota.add_argument("name")
    for limit in QUOTA_LIMITS:
        quota.add_argument(f"--{limit.option}", type=int, metavar="N", dest=limit.name,
                           help=limit.label)  # fmt: skip
    quota.add_argument("--stored-policy", choices=("refuse", "truncate"),
                       help="at the stored-bytes limit: refuse new appends or truncate the "
                       "oldest data")  # fmt: skip


def scope_quota(args: argparse.Namespace) -> None:
    body: dict[str, Any] = {}
    for limit in QUOTA_LIMITS:
        value = getattr(args, limit.name)
        if value is not None:
            try:
                body[limit.field] = limit_value(f"--{limit.option}", value, zero_is_none=True)
            except ValueError as exc:
                raise CommandError(str(exc), EXIT_USAGE) from None
    if args.stored_policy:
        body["storedPolicy"] = args.stored_policy
    found = remote.admin(args, lambda a: a.scope_quota(args.name, body))
    lines = [f"{'LIMIT':<22} {'USED':>16} {'QUOTA':>16}"]
    for row in QUOTA_LIMITS:
        field = row.field
        limit = found["limits"][field]
        used = found["used"][field]
        shown = "-" if used is None else f"{used:,.0f}"
        lines.append(f"{field:<22} {shown:>16} {'none' if limit is None else f'{limit:,}':>16}")
    lines.append(f"stored policy: {found['storedPolicy']}; throttled "
                 f"{found['throttleSeconds']:.1f} s in all")  # fmt: skip
    remote.out(args, found, "\n".join(lines))


def scope_create(args: argparse.Namespace) -> None:
    made = remote.admin(args, lambda a: a.create_scope(args.name), exists_ok=True)
    if made is None:
        remote.out(args, {"scopeName": args.name, "created": False}, f"{args.name} exists already")
    else:
        remote.out(args, made, f"created {args.name}")


def scope_list(args: argparse.Namespace) -> None:
    found = remote.admin(args, lambda a: a.list_scopes())
    remote.out(args, found, "\n".join(s["scopeName"] for s in found["scopes"]))


def scope_delete(args: argparse.Namespace) -> None:
    remote.admin(args, lambda a: a.delete_scope(args.name))
    remote.out(args, {"deleted": args.name}, f"deleted {args.name}")
