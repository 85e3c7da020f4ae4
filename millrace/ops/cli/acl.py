"""``millrace acl grant|deny|revoke|list|check|join|leave|import``: grants on Pravega's resource
strings (``controller_app.access.acl``), written to the metadata database like ``millrace user``;
each change audited as the local user."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from millrace.kernel.config import WebSettings, variables
from millrace.ops.cli.base import (
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    Parents,
    command,
)
from millrace.ops.cli.users import metadata_database

_WEB = variables(WebSettings)
_PERMISSIONS = ("READ", "READ_UPDATE", "MANAGE")


def register(commands: Any, parents: Parents) -> None:
    acl = command(
        commands, "acl", None,
        "Grant users and groups permissions on resources (prn::/scope:S/stream:T).",
        parents=[parents.data_dir],
    )  # fmt: skip
    actions = acl.add_subparsers(dest="acl_command", metavar="ACTION", required=True)
    for name, summary in (
        ("grant", "Allow PRINCIPAL PERMISSION on RESOURCE (a pattern: * is any characters)."),
        ("deny", "Refuse PRINCIPAL PERMISSION (and stronger) on RESOURCE, whatever it is granted."),
    ):
        action = command(actions, name, run_acl, summary, variables=_WEB,
                         parents=[parents.data_dir])  # fmt: skip
        action.add_argument("principal", metavar="PRINCIPAL", help="user:NAME or group:NAME")
        action.add_argument("permission", choices=_PERMISSIONS, metavar="PERMISSION",
                            help=" | ".join(_PERMISSIONS))  # fmt: skip
        action.add_argument("resource", metavar="RESOURCE", help="e.g. prn::/scope:team-a*")
    revoke = command(actions, "revoke", run_acl, "Remove PRINCIPAL's grant (or --deny) on it.",
                     variables=_WEB, parents=[parents.data_dir])  # fmt: skip
    revoke.add_argument("principal", metavar="PRINCIPAL")
    revoke.add_argument("resource", metavar="RESOURCE")
    revoke.add_argument("--deny", action="store_true", help="remove the denial instead")
    listing = command(actions, "list", run_acl, "List grants (a user's include its groups').",
                      variables=_WEB, parents=[parents.data_dir])  # fmt: skip
    listing.add_argument("--principal", default="", help="user:NAME or group:NAME")
    listing.add_argument("--resource", default="", help="only grants matching this resource")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    check = command(actions, "check", run_acl, "Say whether USER may do PERMISSION on RESOURCE.",
                    variables=_WEB, parents=[parents.data_dir])  # fmt: skip
    check.add_argument("user", metavar="USER")
    check.add_argument("permission", choices=_PERMISSIONS, metavar="PERMISSION")
    check.add_argument("resource", metavar="RESOURCE")
    for name, summary in (("join", "Put USER in GROUP (made if needed)."),
                          ("leave", "Take USER out of GROUP.")):  # fmt: skip
        action = command(actions, name, run_acl, summary, variables=_WEB,
                         parents=[parents.data_dir])  # fmt: skip
        action.add_argument("group", metavar="GROUP")
        action.add_argument("user", metavar="USER")
    imported = command(
        actions, "import", run_acl,
        "Import users and grants from Pravega's password file (user:password:acl lines).",
        variables=_WEB, parents=[parents.data_dir],
    )  # fmt: skip
    imported.add_argument("file", type=Path, metavar="FILE")


def run_acl(args: argparse.Namespace, rest: list[str]) -> int:
    metadata_database()
    import getpass

    from controller_app.access import acl
    from controller_app.access.users import audit_local
    from controller_app.errors import InvalidArgumentError, NotFoundError

    by = f"local:{getpass.getuser()}"
    action = args.acl_command
    try:
        if action in ("grant", "deny"):
            row = acl.grant(args.principal, args.resource, args.permission,
                            deny=action == "deny", by=by, audit_as=audit_local)  # fmt: skip
            print(f"#{row['id']} {row['effect']} {row['principal']} {row['permission']} "
                  f"on {row['resource']}")  # fmt: skip
        elif action == "revoke":
            removed = acl.revoke(args.principal, args.resource, deny=args.deny,
                                 audit_as=audit_local)  # fmt: skip
            print(f"{removed} removed")
        elif action == "list":
            return _print_grants(acl.listing(args.principal, args.resource), as_json=args.json)
        elif action == "check":
            found = acl.check(args.user, args.resource, args.permission)
            verdict = "allowed" if found["allowed"] else "refused"
            print(f"{verdict}: {found['reason']}")
            return EXIT_OK if found["allowed"] else 1
        elif action in ("join", "leave"):
            acl.members(args.group, args.user, join=action == "join", audit_as=audit_local)
            print(f"{args.user} {'joined' if action == 'join' else 'left'} {args.group}")
        else:
            text = args.file.read_text()
            found = acl.import_password_file(text, by=by, audit_as=audit_local)
            print(f"{found['users']} users ({found['usersCreated']} made), "
                  f"{found['grants']} grants")  # fmt: skip
    except (InvalidArgumentError, NotFoundError, OSError) as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    return EXIT_OK


def _print_grants(found: list[dict[str, Any]], *, as_json: bool) -> int:
    if as_json:
        print(json.dumps(found, indent=2))
        return EXIT_OK
    print(f"{'ID':>4} {'EFFECT':<6} {'PRINCIPAL':<24} {'PERMISSION':<11} RESOURCE")
    for g in found:
        print(f"{g['id']:>4} {g['effect']:<6} {g['principal']:<24} {g['permission']:<11} "
              f"{g['resource']}")  # fmt: skip
    return EXIT_OK
