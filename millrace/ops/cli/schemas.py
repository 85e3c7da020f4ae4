"""``millrace schema register|list|show|check|delete|config``: the schema registry.

Through the registry's REST API (Confluent's, under ``/registry``), as every client command.
A schema is read from a file (``-``: standard input); its type follows the file's extension
(``.avsc`` Avro, ``.json`` JSON Schema, ``.proto`` Protobuf) unless ``--type`` says. ``check``
ends with status 1 when the schema would be refused, printing why.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from millrace.ops.cli import remote
from millrace.ops.cli.base import CommandError, Parents

TYPES = {".avsc": "AVRO", ".avro": "AVRO", ".json": "JSON", ".proto": "PROTOBUF"}
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")  # fmt: skip


def register(commands: Any, parents: Parents) -> None:
    add = remote.command
    parents_ = [parents.data_dir, remote.options()]
    group = add(commands, "schema", None, "The schema registry: subjects, versions, levels.",
                parents=[parents.data_dir])  # fmt: skip
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True)
    given = argparse.ArgumentParser(add_help=False)
    given.add_argument("subject")
    given.add_argument("file", metavar="FILE", help="the schema ('-': standard input)")
    given.add_argument("--type", choices=sorted(set(TYPES.values())),
                       help="the schema's type (default: from FILE's extension)")  # fmt: skip
    given.add_argument("--reference", action="append", default=[], metavar="NAME=SUBJECT:VERSION",
                       help="a schema it refers to (repeat for several)")  # fmt: skip
    add(verbs, "register", remote.handler(schema_register),
        "Register FILE under SUBJECT; print its id.", parents=[*parents_, given])  # fmt: skip
    listing = add(verbs, "list", remote.handler(schema_list), "List the subjects.",
                  parents=parents_)  # fmt: skip
    listing.add_argument("--prefix", default="", help="only subjects starting with this")
    listing.add_argument("--deleted", action="store_true", help="soft-deleted ones too")
    show = add(verbs, "show", remote.handler(schema_show),
               "Print a version of SUBJECT (default: the latest), or a schema by --id.",
               parents=parents_)  # fmt: skip
    show.add_argument("subject", nargs="?")
    show.add_argument("version", nargs="?", default="latest")
    show.add_argument("--id", type=int, help="the schema with this global id")
    check = add(verbs, "check", remote.handler(schema_check),
                "Whether FILE may be registered next under SUBJECT (exit 1: not, and why).",
                parents=[*parents_, given])  # fmt: skip
    check.add_argument("--version", help="against this version only (default: as registering)")
    delete = add(verbs, "delete", remote.handler(schema_delete),
                 "Soft-delete SUBJECT, or one --version; --permanent after a soft delete.",
                 parents=parents_)  # fmt: skip
    delete.add_argument("subject")
    delete.add_argument("--version")
    delete.add_argument("--permanent", action="store_true")
    config = add(verbs, "config", remote.handler(schema_config),
                 "Print or set (--level) the compatibility level of SUBJECT, or the global one.",
                 parents=parents_)  # fmt: skip
    config.add_argument("subject", nargs="?")
    config.add_argument("--level", type=str.upper, choices=LEVELS)


def _body(args: argparse.Namespace) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file).read()  # noqa: SIM115
    except OSError as exc:
        raise CommandError(f"cannot read {args.file}: {exc.strerror}") from None
    schema_type = args.type
    if schema_type is None:
        suffix = "." + args.file.rsplit(".", 1)[-1].lower() if "." in args.file else ""
        schema_type = TYPES.get(suffix)
        if schema_type is None:
            raise CommandError(
                f"say the schema's type with --type ({args.file} has no known extension)"
            )
    body: dict[str, Any] = {"schema": text, "schemaType": schema_type}
    references = []
    for given in args.reference:
        name, _, where = given.partition("=")
        subject, _, version = where.rpartition(":")
        if not name or not subject or not version.isdigit():
            raise CommandError(f"--reference {given!r}: expected NAME=SUBJECT:VERSION")
        references.append({"name": name, "subject": subject, "version": int(version)})
    if references:
        body["references"] = references
    return body


def schema_register(args: argparse.Namespace) -> None:
    body = _body(args)
    made = remote.admin(args, lambda a: a.register_schema(args.subject, body))
    remote.out(args, made, str(made["id"]))  # (alone: id=$(millrace schema register ...))


def schema_list(args: argparse.Namespace) -> None:
    query = {"subjectPrefix": args.prefix, "deleted": str(args.deleted).lower()}
    found = remote.admin(args, lambda a: a.subjects(query))
    remote.out(args, found, "\n".join(found))


def schema_show(args: argparse.Namespace) -> None:
    if args.id is not None:
        found = remote.admin(args, lambda a: a.schema_by_id(args.id))
        title = f"schema {args.id}"
    elif args.subject:
        found = remote.admin(args, lambda a: a.schema_version(args.subject, args.version))
        title = f"{found['subject']} version {found['version']}: schema {found['id']}"
    else:
        raise CommandError("name a SUBJECT (and a VERSION), or a schema --id")
    kind = found.get("schemaType", "AVRO")
    remote.out(args, found, f"{title} ({kind})\n{found['schema']}")


def schema_check(args: argparse.Namespace) -> None:
    body = _body(args)
    found = remote.admin(
        args, lambda a: a.check_compatibility(args.subject, args.version or None, body)
    )
    if found["is_compatible"]:
        remote.out(args, found, "compatible")
        return
    remote.out(args, found, "incompatible:\n" + "\n".join(f"  {m}" for m in found["messages"]))
    raise SystemExit(1)


def schema_delete(args: argparse.Namespace) -> None:
    gone = remote.admin(args, lambda a: a.delete_subject(
        args.subject, args.version or None, permanent=args.permanent
    ))  # fmt: skip
    how = "permanently deleted" if args.permanent else "deleted"
    versions = gone if isinstance(gone, list) else [gone]
    remote.out(args, gone, f"{how} {args.subject} version(s) {', '.join(map(str, versions))}")


def schema_config(args: argparse.Namespace) -> None:
    found = remote.admin(args, lambda a: a.compatibility_level(args.subject, args.level))
    if args.level:
        remote.out(args, found, f"{args.subject or 'global'}: {found['compatibility']}")
        return
    remote.out(args, found, f"{args.subject or 'global'}: {found['compatibilityLevel']}")
