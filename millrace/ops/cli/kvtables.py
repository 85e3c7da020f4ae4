"""``millrace kvt create|list|info|delete|get|put|remove|scan``: key-value tables.

Through the REST API, as every client command. A key is given as text (UTF-8), or as URL-safe
base64 with ``--base64``: the primary key and the secondary key together, each of the table's
exact length. ``put`` and ``remove`` take ``--version`` (only if the entry is at that version)
and ``put`` takes ``--if-absent``; a refused condition ends the command with its reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from millrace.ops.cli import remote
from millrace.ops.cli.base import Parents


def register(commands: Any, parents: Parents) -> None:
    add = remote.command
    parents_ = [parents.data_dir, remote.options()]
    group = add(commands, "kvt", None, "Key-value tables: keys and values with versions.",
                parents=[parents.data_dir])  # fmt: skip
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = add(verbs, "create", remote.handler(kvt_create), "Create SCOPE/TABLE.",
                 parents=parents_)  # fmt: skip
    create.add_argument("name", metavar="SCOPE/TABLE")
    create.add_argument("--partitions", type=int, default=1, help="table segments (default 1)")
    create.add_argument("--primary-key-length", type=int, required=True, metavar="BYTES")
    create.add_argument("--secondary-key-length", type=int, default=0, metavar="BYTES",
                        help="(default 0: no secondary key)")  # fmt: skip
    add(verbs, "list", remote.handler(kvt_list), "List the key-value tables of SCOPE.",
        parents=parents_).add_argument("scope")  # fmt: skip
    for verb, handler, summary in (
        ("info", kvt_info, "Configuration, state and partitions."),
        ("delete", kvt_delete, "Delete a key-value table and every entry in it."),
    ):
        add(verbs, verb, remote.handler(handler), summary, parents=parents_).add_argument(
            "name", metavar="SCOPE/TABLE"
        )
    keyed = argparse.ArgumentParser(add_help=False)
    keyed.add_argument("name", metavar="SCOPE/TABLE")
    keyed.add_argument("key", metavar="KEY")
    keyed.add_argument("--base64", action="store_true", help="KEY is URL-safe base64")
    add(verbs, "get", remote.handler(kvt_get), "Print the value of KEY and its version.",
        parents=[*parents_, keyed])  # fmt: skip
    put = add(verbs, "put", remote.handler(kvt_put), "Set the value of KEY; print its new version.",
              parents=[*parents_, keyed])  # fmt: skip
    put.add_argument("value", metavar="VALUE", nargs="?",
                     help="the value (text); '-' or none: read it from standard input")  # fmt: skip
    condition = put.add_mutually_exclusive_group()
    condition.add_argument("--version", type=int, help="only if the entry is at this version")
    condition.add_argument("--if-absent", action="store_true", help="only if KEY is absent")
    remove = add(verbs, "remove", remote.handler(kvt_remove), "Remove KEY.",
                 parents=[*parents_, keyed])  # fmt: skip
    remove.add_argument("--version", type=int, help="only if the entry is at this version")
    scan = add(verbs, "scan", remote.handler(kvt_scan), "Print the entries, a page at a time.",
               parents=parents_)  # fmt: skip
    scan.add_argument("name", metavar="SCOPE/TABLE")
    scan.add_argument("--prefix", default="", help="only keys starting with this text")
    scan.add_argument("--limit", type=int, default=0, help="stop after N entries (0: all)")


def kvt_create(args: argparse.Namespace) -> None:
    scope, table = remote.split(args.name)
    body = {"kvtName": table, "partitionCount": args.partitions,
            "primaryKeyLength": args.primary_key_length,
            "secondaryKeyLength": args.secondary_key_length}  # fmt: skip
    made = remote.admin(args, lambda a: a.create_kvt(scope, body))
    remote.out(args, made, f"created {args.name} ({made['partitionCount']} partitions)")


def kvt_list(args: argparse.Namespace) -> None:
    found = remote.admin(args, lambda a: a.list_kvts(args.scope))
    remote.out(args, found, "\n".join(t["kvtName"] for t in found["kvtables"]))


def kvt_info(args: argparse.Namespace) -> None:
    info = remote.admin(args, lambda a: a.kvt(*remote.split(args.name)))
    lines = [
        f"{args.name}: {info['state'].lower()}, {info['partitionCount']} partitions, keys of "
        f"{info['primaryKeyLength']} + {info['secondaryKeyLength']} bytes"
    ]
    lines += [f"  partition {s['partition']}: {s['name']} on {s['host']}:{s['port']}"
              for s in info["segments"] if "host" in s]  # fmt: skip
    remote.out(args, info, "\n".join(lines))


def kvt_delete(args: argparse.Namespace) -> None:
    remote.admin(args, lambda a: a.delete_kvt(*remote.split(args.name)))
    remote.out(args, {"deleted": args.name}, f"deleted {args.name}")


def kvt_get(args: argparse.Namespace) -> None:
    table = remote.split(args.name)
    entry = remote.admin(args, lambda a: a.entry(*table, args.key, base64=args.base64))
    shown = entry["value"] if entry["value"] is not None else f"base64:{entry['valueBase64']}"
    remote.out(args, entry, f"{shown}\n(version {entry['version']})")


def kvt_put(args: argparse.Namespace) -> None:
    value = sys.stdin.read() if args.value in (None, "-") else args.value
    headers = {}
    if args.version is not None:
        headers["If-Match"] = f'"{args.version}"'
    elif args.if_absent:
        headers["If-None-Match"] = "*"
    table = remote.split(args.name)
    put = remote.admin(args, lambda a: a.entry(
        *table, args.key, base64=args.base64, method="PUT", body={"value": value}, headers=headers
    ))  # fmt: skip
    remote.out(args, put, str(put["version"]))  # (alone: v=$(millrace kvt put ...))


def kvt_remove(args: argparse.Namespace) -> None:
    headers = {} if args.version is None else {"If-Match": f'"{args.version}"'}
    table = remote.split(args.name)
    remote.admin(args, lambda a: a.entry(
        *table, args.key, base64=args.base64, method="DELETE", headers=headers
    ))  # fmt: skip
    remote.out(args, {"removed": args.key}, f"removed {args.key}")


def kvt_scan(args: argparse.Namespace) -> None:
    token, shown = "", 0
    while True:
        query = {"prefix": args.prefix, "continuationToken": token, "limit": 1000}
        page = remote.admin(args, lambda a, q=query: a.entries(*remote.split(args.name), q))
        for entry in page["entries"]:
            if args.limit and shown >= args.limit:
                return
            if args.json:
                print(json.dumps(entry))
            else:
                key = entry["key"] if entry["key"] is not None else f"base64:{entry['keyBase64']}"
                value = (entry["value"] if entry["value"] is not None
                         else f"base64:{entry['valueBase64']}")  # fmt: skip
                print(f"{key}\t{value}\t(version {entry['version']})")
            shown += 1
        token = page["continuationToken"]
        if not token:
            return
