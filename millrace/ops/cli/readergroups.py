"""``millrace readergroup create|list|info|lag|delete|checkpoint|reset|read``.

``readergroup read`` reads as a member of a reader group (sharing the streams with the group's
other readers) through the Python client; ``readergroup checkpoint`` waits, showing which
readers it still waits for, and prints the stream cuts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from millrace.kernel import defaults
from millrace.ops.cli import remote
from millrace.ops.cli.base import CommandError, Parents


def register(commands: Any, parents: Parents) -> None:
    add = remote.command
    data_dir = parents.data_dir
    parents_ = [data_dir, remote.options()]
    group = add(commands, "readergroup", None, "Reader groups: readers sharing streams.",
                parents=[data_dir])  # fmt: skip
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = add(verbs, "create", remote.handler(readergroup_create), "Create SCOPE/GROUP.",
                 parents=parents_)  # fmt: skip
    create.add_argument("name", metavar="SCOPE/GROUP")
    create.add_argument("--stream", action="append", required=True,
                        help="SCOPE/STREAM to read (repeat for more)")  # fmt: skip
    create.add_argument("--from", dest="start", default="head",
                        help="head (default), tail or a stream cut text")  # fmt: skip
    create.add_argument(
        "--retention", default="NONE",
        choices=["NONE", "MANUAL_RELEASE_AT_USER_STREAMCUT",
                 "AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT"],
        help="whether the group's position holds back retention (default NONE)",
    )  # fmt: skip
    create.add_argument(
        "--reader-timeout-ms", type=int, default=defaults.READER_TIMEOUT_MS,
        help="a reader silent this long is declared dead (default %(default)s)",
    )  # fmt: skip
    add(verbs, "list", remote.handler(readergroup_list), "List the reader groups of SCOPE.",
        parents=parents_).add_argument("scope")  # fmt: skip
    for verb, handler, summary in (
        ("info", readergroup_info, "Readers, their segments and positions, checkpoints."),
        ("lag", readergroup_lag, "Lag (bytes, events, seconds) per reader, and the status."),
        ("delete", readergroup_delete, "Delete a reader group."),
    ):
        add(verbs, verb, remote.handler(handler), summary, parents=parents_).add_argument(
            "name", metavar="SCOPE/GROUP"
        )
    checkpoint = add(verbs, "checkpoint", remote.handler(readergroup_checkpoint),
                     "Checkpoint: wait for every reader, print the stream cuts.",
                     parents=parents_)  # fmt: skip
    checkpoint.add_argument("name", metavar="SCOPE/GROUP")
    checkpoint.add_argument("checkpoint", metavar="NAME")
    checkpoint.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    reset = add(verbs, "reset", remote.handler(readergroup_reset), "Read again from new starts.",
                parents=parents_)  # fmt: skip
    reset.add_argument("name", metavar="SCOPE/GROUP")
    reset.add_argument("--stream", action="append", help="SCOPE/STREAM (default: as configured)")
    reset.add_argument("--from", dest="start", default="head",
                       help="head (default), tail or a stream cut text")  # fmt: skip
    gread = add(verbs, "read", remote.handler(readergroup_read), "Read as a member of the group.",
                parents=parents_)  # fmt: skip
    gread.add_argument("name", metavar="SCOPE/GROUP")
    gread.add_argument("--reader", help="reader id (default: a new random one)")
    gread.add_argument("--limit", type=int, default=0, help="stop after N events")
    gread.add_argument(
        "--idle", type=float, default=0,
        help="stop after this many seconds without an event (default: never)",
    )  # fmt: skip


def _group(name: str) -> tuple[str, str]:
    return remote.split(name)


def _starts(streams: list[str], start: str) -> dict[str, str]:
    for scoped in streams:
        remote.split(scoped)
    if start not in ("head", "tail") and not start.startswith("mrcut1."):
        raise CommandError("--from is head, tail or a stream cut text (mrcut1....)")
    return dict.fromkeys(streams, start)


def readergroup_create(args: argparse.Namespace) -> None:
    scope, group = remote.split(args.name)
    body = {
        "readerGroupName": group,
        "streams": _starts(args.stream, args.start),
        "retentionType": args.retention,
        "readerTimeoutMs": args.reader_timeout_ms,
    }
    made = remote.admin(args, lambda a: a.create_reader_group(scope, body))
    remote.out(args, made, f"created {args.name} reading {', '.join(made['streamList'])}")


def readergroup_list(args: argparse.Namespace) -> None:
    found = remote.admin(args, lambda a: a.list_reader_groups(args.scope))
    remote.out(args, found, "\n".join(g["readerGroupName"] for g in found["readerGroups"]))


def readergroup_info(args: argparse.Namespace) -> None:
    info = remote.admin(args, lambda a: a.reader_group(*_group(args.name)))
    lines = [
        f"{args.name}: generation {info['generation']}, reads {', '.join(info['streamList'])}",
        f"  unassigned segments: {len(info['unassignedSegments'])},"
        f" waiting for predecessors: {len(info['futureSegments'])}",
    ]
    for reader in info["readers"]:
        held = ", ".join(f"{k}@{v}" for k, v in sorted(reader["segments"].items())) or "none"
        lines.append(f"  reader {reader['readerId']}: {held}")
    for checkpoint in info["checkpoints"]:
        state = "complete" if checkpoint["complete"] else "waiting"
        lines.append(f"  checkpoint {checkpoint['checkpointName']}: {state}")
    remote.out(args, info, "\n".join(lines))


def _lag_line(what: str, found: dict[str, Any]) -> str:
    events = "?" if found["lagEvents"] is None else f"{found['lagEvents']:,}"
    return (f"{what}: {found['lagBytes']:,} bytes, {events} events,"
            f" {found['lagSeconds']:.1f} s behind")  # fmt: skip


def readergroup_lag(args: argparse.Namespace) -> None:
    found = remote.admin(args, lambda a: a.reader_group_lag(*_group(args.name)))
    lines = [f"{args.name}: {found['status']} ({found['reason']})", _lag_line("  group", found)]
    for reader in found["readers"]:
        state = "" if reader["online"] else " (offline)"
        lines.append(_lag_line(f"  reader {reader['readerId']}{state}", reader))
    if found["unassigned"]:
        lines.append(_lag_line("  unassigned", {
            "lagBytes": sum(s["lagBytes"] for s in found["unassigned"]),
            "lagEvents": None if any(s["lagEvents"] is None for s in found["unassigned"])
            else sum(s["lagEvents"] for s in found["unassigned"]),
            "lagSeconds": max(s["lagSeconds"] for s in found["unassigned"]),
        }))  # fmt: skip
    remote.out(args, found, "\n".join(lines))


def readergroup_delete(args: argparse.Namespace) -> None:
    remote.admin(args, lambda a: a.delete_reader_group(*_group(args.name)))
    remote.out(args, {"deleted": args.name}, f"deleted {args.name}")


def readergroup_checkpoint(args: argparse.Namespace) -> None:

    group = _group(args.name)
    remote.admin(args, lambda a: a.start_checkpoint(*group, args.checkpoint))
    deadline = time.monotonic() + args.timeout
    shown = None
    while True:
        status = remote.admin(args, lambda a: a.checkpoint(*group, args.checkpoint))
        if status["complete"]:
            break
        waiting = ", ".join(status["pendingReaders"])
        if waiting != shown and not args.json:
            print(f"waiting for reader(s) {waiting}", file=sys.stderr, flush=True)
            shown = waiting
        if time.monotonic() > deadline:
            raise CommandError(f"checkpoint {args.checkpoint} still waits for {waiting}")
        time.sleep(0.2)

    # (imported when the command runs: ``millrace --help`` and the node's processes skip the SDK)
    from millrace.client.streamcut import StreamCut

    cuts = {
        scoped: StreamCut(*remote.split(scoped), {int(k): v for k, v in cut.items()}).to_text()
        for scoped, cut in status["streamCuts"].items()
    }
    remote.out(
        args, {**status, "streamCutTexts": cuts}, "\n".join(f"{s} {c}" for s, c in cuts.items())
    )


def readergroup_reset(args: argparse.Namespace) -> None:
    body = {"streams": _starts(args.stream, args.start)} if args.stream else {}
    info = remote.admin(args, lambda a: a.reset_reader_group(*_group(args.name), body))
    remote.out(args, info, f"reset {args.name}: generation {info['generation']}")


def readergroup_read(args: argparse.Namespace) -> None:

    scope, group = remote.split(args.name)
    # (imported when the command runs: ``millrace --help`` and the node's processes skip the SDK)
    from millrace.client.manager import StreamManager
    from millrace.client.reader_group import TruncatedDataError

    manager = StreamManager(remote.url(args), token=remote.token(args), tls_ca=remote.ca(args))
    reader = None
    seen = 0
    try:
        reader = manager.reader_group(scope, group).create_reader(args.reader)
        while not args.limit or seen < args.limit:
            try:
                event = reader.read_next(timeout=args.idle or None)
            except TimeoutError:
                break
            except TruncatedDataError as exc:
                print(f"note: {exc}", file=sys.stderr, flush=True)
                continue
            if event is None:
                break
            if event.is_checkpoint:
                continue
            text = event.data.decode("utf-8", "replace")
            if args.json:
                print(json.dumps({"segment": event.segment, "offset": event.offset,
                                  "text": text}), flush=True)  # fmt: skip
            else:
                print(text, flush=True)
            seen += 1
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        raise CommandError(f"{type(exc).__name__}: {exc}") from None
    finally:
        if reader is not None:
            reader.close()  # leaves the group: its segments go to the others at its position
        manager.close()
