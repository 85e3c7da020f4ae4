"""Everyday commands in Pravega's ``<component> <verb>`` style, over the REST API and WebSockets.

    millrace status [--url URL] [--json]
    millrace scope create|list|delete ...
    millrace stream create|list|info|seal|delete|scale|truncate|append|read ...
    millrace readergroup create|list|info|delete|checkpoint|reset|read ...

They talk to a running node: ``--url`` (default ``$MILLRACE_URL`` or http://127.0.0.1:9091) with
``--token`` (default ``$MILLRACE_TOKEN``, else the standalone administrator's
``<data dir>/admin-token``). ``--json`` prints machine-readable output. ``stream append`` writes
its arguments, or one event per line of standard input (with a progress bar), through the
Python client; ``stream read`` follows the stream over the WebSocket tail read and prints one
event per line until ``--limit`` events or Ctrl-C. ``readergroup read`` reads as a member of a
reader group (sharing the streams with the group's other readers) through the Python client;
``readergroup checkpoint`` waits, showing which readers it still waits for, and prints the
stream cuts.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

DEFAULT_URL = "http://127.0.0.1:9091"
#: How the commands introduce themselves: the audit log counts their changes as the CLI's.
CLI_AGENT = "millrace-cli"


class AdminError(Exception):
    """A command that failed; the message is printed as one line."""


# -- plumbing -------------------------------------------------------------------------------


def _token(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token)
    if os.environ.get("MILLRACE_TOKEN"):
        return os.environ["MILLRACE_TOKEN"]
    data_dir = Path(os.environ.get("MILLRACE_DATA_DIR", "./data"))
    token_file = data_dir / "admin-token"
    if token_file.exists():
        return token_file.read_text().strip()
    raise AdminError(
        f"no API token: pass --token, set MILLRACE_TOKEN, or run where {token_file} exists"
    )


def _url(args: argparse.Namespace) -> str:
    return str(args.url or os.environ.get("MILLRACE_URL") or DEFAULT_URL).rstrip("/")


def _split(name: str) -> tuple[str, str]:
    scope, _, stream = name.partition("/")
    if not scope or not stream or "/" in stream:
        raise AdminError(f"expected SCOPE/STREAM, not {name!r}")
    return scope, stream


def _call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    """One REST call through the Python client's controller calls: a controller restarting
    or a service it needs that is away (503) is waited for, within the client's patience
    (``millrace.client.controller.PATIENCE_SECONDS``)."""
    import asyncio

    import httpx

    from millrace.client.controller import AsyncControllerClient, ControllerError

    async def call() -> Any:
        client = AsyncControllerClient(_url(args), _token(args), timeout=90, user_agent=CLI_AGENT)
        try:
            return await client.call(method, path, body)
        finally:
            await client.close()

    try:
        return asyncio.run(call())
    except httpx.HTTPError as exc:
        raise AdminError(f"cannot reach {_url(args)}: {exc}") from None
    except ControllerError as exc:
        raise AdminError(f"{exc.code}: {exc.message}") from None


def _out(args: argparse.Namespace, value: Any, text: str) -> None:
    print(json.dumps(value, indent=2) if args.json else text)


# -- scope ----------------------------------------------------------------------------------


def scope_create(args: argparse.Namespace) -> None:
    _out(args, _call(args, "POST", "/scopes", {"scopeName": args.name}), f"created {args.name}")


def scope_list(args: argparse.Namespace) -> None:
    found = _call(args, "GET", "/scopes")
    _out(args, found, "\n".join(s["scopeName"] for s in found["scopes"]))


def scope_delete(args: argparse.Namespace) -> None:
    _call(args, "DELETE", f"/scopes/{args.name}")
    _out(args, {"deleted": args.name}, f"deleted {args.name}")


# -- stream ---------------------------------------------------------------------------------


def stream_create(args: argparse.Namespace) -> None:
    scope, stream = _split(args.name)
    body = {
        "streamName": stream,
        "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": args.segments},
        "streamTags": args.tag or [],
    }
    made = _call(args, "POST", f"/scopes/{scope}/streams", body)
    _out(args, made, f"created {args.name} with {args.segments} segment(s)")


def stream_list(args: argparse.Namespace) -> None:
    found = _call(args, "GET", f"/scopes/{args.scope}/streams")
    _out(args, found, "\n".join(s["streamName"] for s in found["streams"]))


def stream_info(args: argparse.Namespace) -> None:
    scope, stream = _split(args.name)
    info = _call(args, "GET", f"/scopes/{scope}/streams/{stream}/info")
    segments = _call(args, "GET", f"/scopes/{scope}/streams/{stream}/segments")["segments"]
    info["segments"] = segments
    lines = [f"{args.name}: {info['state']}, epoch {info['currentEpoch']}, tags {info['tags']}"]
    lines += [
        f"  segment {s['segmentId']} ({s['name']}): keys [{s['keyStart']}, {s['keyEnd']})"
        for s in segments
    ]
    _out(args, info, "\n".join(lines))


def stream_seal(args: argparse.Namespace) -> None:
    scope, stream = _split(args.name)
    body = {"streamState": "SEALED"}
    _out(args, _call(args, "PUT", f"/scopes/{scope}/streams/{stream}/state", body), "sealed")


def stream_delete(args: argparse.Namespace) -> None:
    scope, stream = _split(args.name)
    _call(args, "DELETE", f"/scopes/{scope}/streams/{stream}")
    _out(args, {"deleted": args.name}, f"deleted {args.name}")


def _ranges(text: str) -> list[list[float]]:
    try:
        return [[float(x) for x in part.split("-", 1)] for part in text.split(",")]
    except ValueError:
        raise AdminError(f"ranges are START-END,START-END, not {text!r}") from None


def stream_scale(args: argparse.Namespace) -> None:
    scope, stream = _split(args.name)
    try:
        sealed = [int(x) for x in args.seal.split(",")]
    except ValueError:
        raise AdminError(f"--seal takes segment ids, not {args.seal!r}") from None
    body = {"sealedSegments": sealed, "newRanges": _ranges(args.ranges)}
    done = _call(args, "POST", f"/scopes/{scope}/streams/{stream}/scale", body)
    _out(args, done, f"epoch {done['epoch']}: {len(done['segments'])} segment(s)")


def stream_truncate(args: argparse.Namespace) -> None:
    scope, stream = _split(args.name)
    try:
        cut = dict(part.split("=", 1) for part in args.cut.split(","))
        cut = {str(int(k)): int(v) for k, v in cut.items()}
    except ValueError:
        raise AdminError(f"--cut takes ID=OFFSET,ID=OFFSET, not {args.cut!r}") from None
    done = _call(args, "POST", f"/scopes/{scope}/streams/{stream}/truncate", {"streamCut": cut})
    _out(args, done, "truncated")


def stream_append(args: argparse.Namespace, rest: list[str] | None = None) -> None:
    from millrace.client.manager import StreamManager

    scope, stream = _split(args.name)
    unknown = [x for x in rest or () if x.startswith("-")]
    if unknown:
        raise AdminError(f"unrecognized option {unknown[0]}")
    events = [*args.events, *(rest or ())] or None
    manager = StreamManager(_url(args), token=_token(args))
    try:
        writer = manager.create_writer(scope, stream)
        count = 0
        if events is None:
            from tqdm import tqdm

            lines = tqdm(sys.stdin, unit=" events", disable=not sys.stderr.isatty() or args.json)
            for line in lines:
                writer.write_event(line.rstrip("\n"), routing_key=args.key)
                count += 1
        else:
            for event in events:
                writer.write_event(event, routing_key=args.key)
                count += 1
        writer.flush()
        writer.close()
    except Exception as exc:
        raise AdminError(f"{type(exc).__name__}: {exc}") from None
    finally:
        manager.close()
    _out(args, {"appended": count}, f"appended {count} event(s), durable")


def stream_read(args: argparse.Namespace) -> None:
    scope, stream = _split(args.name)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_tail(args, scope, stream))


async def _tail(args: argparse.Namespace, scope: str, stream: str) -> None:
    import websockets

    base = _url(args).replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    query = f"from={quote(args.start)}&encoding=utf-8"
    uri = f"{base}/ws/streams/{quote(scope)}/{quote(stream)}?{query}"
    headers = {"Authorization": f"Token {_token(args)}"}
    seen = 0
    try:
        async with websockets.connect(uri, additional_headers=headers, origin=_url(args)) as ws:
            async for raw in ws:
                message = json.loads(raw)
                if message["type"] == "error":
                    raise AdminError(f"{message['code']}: {message['message']}")
                if message["type"] == "end":
                    return
                for event in message.get("events", ()):
                    text = event.get("text")
                    if text is None:
                        text = base64.b64decode(event["data"]).decode("utf-8", "replace")
                    if args.json:
                        print(json.dumps({"segment": message["segment"], **event}), flush=True)
                    else:
                        print(text, flush=True)
                    seen += 1
                    if args.limit and seen >= args.limit:
                        return
    except (OSError, websockets.WebSocketException) as exc:
        raise AdminError(f"WebSocket {uri.split('?')[0]}: {exc}") from None


# -- readergroup ----------------------------------------------------------------------------


def _group_path(name: str) -> str:
    scope, group = _split(name)
    return f"/scopes/{scope}/readergroups/{group}"


def _starts(streams: list[str], start: str) -> dict[str, str]:
    for scoped in streams:
        _split(scoped)
    if start not in ("head", "tail") and not start.startswith("mrcut1."):
        raise AdminError("--from is head, tail or a stream cut text (mrcut1....)")
    return dict.fromkeys(streams, start)


def readergroup_create(args: argparse.Namespace) -> None:
    scope, group = _split(args.name)
    body = {
        "readerGroupName": group,
        "streams": _starts(args.stream, args.start),
        "retentionType": args.retention,
        "readerTimeoutMs": args.reader_timeout_ms,
    }
    made = _call(args, "POST", f"/scopes/{scope}/readergroups", body)
    _out(args, made, f"created {args.name} reading {', '.join(made['streamList'])}")


def readergroup_list(args: argparse.Namespace) -> None:
    found = _call(args, "GET", f"/scopes/{args.scope}/readergroups")
    _out(args, found, "\n".join(g["readerGroupName"] for g in found["readerGroups"]))


def readergroup_info(args: argparse.Namespace) -> None:
    info = _call(args, "GET", _group_path(args.name))
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
    _out(args, info, "\n".join(lines))


def readergroup_delete(args: argparse.Namespace) -> None:
    _call(args, "DELETE", _group_path(args.name))
    _out(args, {"deleted": args.name}, f"deleted {args.name}")


def readergroup_checkpoint(args: argparse.Namespace) -> None:
    import time

    path = _group_path(args.name)
    _call(args, "POST", f"{path}/checkpoints", {"checkpointName": args.checkpoint})
    deadline = time.monotonic() + args.timeout
    shown = None
    while True:
        status = _call(args, "GET", f"{path}/checkpoints/{args.checkpoint}")
        if status["complete"]:
            break
        waiting = ", ".join(status["pendingReaders"])
        if waiting != shown and not args.json:
            print(f"waiting for reader(s) {waiting}", file=sys.stderr, flush=True)
            shown = waiting
        if time.monotonic() > deadline:
            raise AdminError(f"checkpoint {args.checkpoint} still waits for {waiting}")
        time.sleep(0.2)
    from millrace.client.streamcut import StreamCut

    cuts = {
        scoped: StreamCut(*_split(scoped), {int(k): v for k, v in cut.items()}).to_text()
        for scoped, cut in status["streamCuts"].items()
    }
    _out(args, {**status, "streamCutTexts": cuts}, "\n".join(f"{s} {c}" for s, c in cuts.items()))


def readergroup_reset(args: argparse.Namespace) -> None:
    body = {"streams": _starts(args.stream, args.start)} if args.stream else {}
    info = _call(args, "POST", f"{_group_path(args.name)}/reset", body)
    _out(args, info, f"reset {args.name}: generation {info['generation']}")


def readergroup_read(args: argparse.Namespace) -> None:
    from millrace.client.manager import StreamManager
    from millrace.client.reader_group import TruncatedDataError

    scope, group = _split(args.name)
    manager = StreamManager(_url(args), token=_token(args))
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
        raise AdminError(f"{type(exc).__name__}: {exc}") from None
    finally:
        if reader is not None:
            reader.close()  # leaves the group: its segments go to the others at its position
        manager.close()


# -- status ---------------------------------------------------------------------------------


def status(args: argparse.Namespace) -> int:
    """``millrace status``: the node's health tree; exit status 0 when UP, 1 otherwise."""
    import httpx

    try:
        response = httpx.get(f"{_url(args)}/health", timeout=10)
        tree = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise AdminError(f"cannot reach {_url(args)}: {exc}") from None
    if args.json:
        print(json.dumps(tree, indent=2))
    else:
        print("\n".join(_health_lines(tree, _url(args))))
    return 0 if tree.get("status") == "UP" else 1


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


# -- parser ---------------------------------------------------------------------------------


def _common() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--url", help=f"the node (default $MILLRACE_URL or {DEFAULT_URL})")
    parent.add_argument(
        "--token", help="API token (default $MILLRACE_TOKEN or <data dir>/admin-token)"
    )
    parent.add_argument("--json", action="store_true", help="machine-readable output")
    return parent


def add_commands(commands: Any, add: Any, data_dir: argparse.ArgumentParser) -> None:
    """Add ``status``, ``scope``, ``stream`` and ``readergroup`` to the ``millrace`` parser
    (``add`` is cli._add)."""
    common = _common()
    node_status = add(
        commands, "status", lambda args, rest: status(args), "Show the node's health, part by part."
    )
    node_status.add_argument("--url", help=f"the node (default $MILLRACE_URL or {DEFAULT_URL})")
    node_status.add_argument("--json", action="store_true", help="the health tree as JSON")
    parents = [data_dir, common]
    scope = add(commands, "scope", None, "Create, list and delete scopes.", parents=[data_dir])
    verbs = scope.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, handler, summary in (
        ("create", scope_create, "Create a scope."),
        ("delete", scope_delete, "Delete an empty scope."),
    ):
        add(verbs, verb, _run(handler), summary, parents=parents).add_argument("name")
    add(verbs, "list", _run(scope_list), "List scopes.", parents=parents)

    stream = add(commands, "stream", None, "Manage, write and read streams.", parents=[data_dir])
    verbs = stream.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = add(verbs, "create", _run(stream_create), "Create SCOPE/STREAM.", parents=parents)
    create.add_argument("name", metavar="SCOPE/STREAM")
    create.add_argument("--segments", type=int, default=1, help="initial segments (default 1)")
    create.add_argument("--tag", action="append", help="a tag (repeat for more)")
    add(verbs, "list", _run(stream_list), "List the streams of SCOPE.", parents=parents
        ).add_argument("scope")  # fmt: skip
    for verb, handler, summary in (
        ("info", stream_info, "State, epoch, tags and current segments."),
        ("seal", stream_seal, "Seal: no more writes."),
        ("delete", stream_delete, "Delete a sealed stream."),
    ):
        add(verbs, verb, _run(handler), summary, parents=parents).add_argument(
            "name", metavar="SCOPE/STREAM"
        )
    scale = add(verbs, "scale", _run(stream_scale), "Split or merge segments.", parents=parents)
    scale.add_argument("name", metavar="SCOPE/STREAM")
    scale.add_argument("--seal", required=True, help="segment ids to seal, comma-separated")
    scale.add_argument("--ranges", required=True, help="new key ranges: 0.5-0.75,0.75-1.0")
    trunc = add(verbs, "truncate", _run(stream_truncate), "Truncate at a stream cut.",
                parents=parents)  # fmt: skip
    trunc.add_argument("name", metavar="SCOPE/STREAM")
    trunc.add_argument("--cut", required=True, help="ID=OFFSET,ID=OFFSET")
    append = add(verbs, "append", _run(stream_append, rest=True),
                 "Append events (arguments or stdin lines).", parents=parents,
                 passthrough="the events")  # fmt: skip
    append.add_argument("name", metavar="SCOPE/STREAM")
    append.add_argument("events", nargs="*", help="events (default: one per line of stdin)")
    append.add_argument("--key", help="routing key of every event")
    read = add(verbs, "read", _run(stream_read), "Follow a stream: print events as they come.",
               parents=parents)  # fmt: skip
    read.add_argument("name", metavar="SCOPE/STREAM")
    read.add_argument("--from", dest="start", default="head",
                      help="head (default), tail, time:<ms> or cut:<id>=<offset>,...")  # fmt: skip
    read.add_argument("--limit", type=int, default=0, help="stop after N events")

    group = add(commands, "readergroup", None, "Reader groups: readers sharing streams.",
                parents=[data_dir])  # fmt: skip
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = add(verbs, "create", _run(readergroup_create), "Create SCOPE/GROUP.",
                 parents=parents)  # fmt: skip
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
        "--reader-timeout-ms", type=int, default=30_000,
        help="a reader silent this long is declared dead (default 30000)",
    )  # fmt: skip
    add(verbs, "list", _run(readergroup_list), "List the reader groups of SCOPE.",
        parents=parents).add_argument("scope")  # fmt: skip
    for verb, handler, summary in (
        ("info", readergroup_info, "Readers, their segments and positions, checkpoints."),
        ("delete", readergroup_delete, "Delete a reader group."),
    ):
        add(verbs, verb, _run(handler), summary, parents=parents).add_argument(
            "name", metavar="SCOPE/GROUP"
        )
    checkpoint = add(verbs, "checkpoint", _run(readergroup_checkpoint),
                     "Checkpoint: wait for every reader, print the stream cuts.",
                     parents=parents)  # fmt: skip
    checkpoint.add_argument("name", metavar="SCOPE/GROUP")
    checkpoint.add_argument("checkpoint", metavar="NAME")
    checkpoint.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    reset = add(verbs, "reset", _run(readergroup_reset), "Read again from new starts.",
                parents=parents)  # fmt: skip
    reset.add_argument("name", metavar="SCOPE/GROUP")
    reset.add_argument("--stream", action="append", help="SCOPE/STREAM (default: as configured)")
    reset.add_argument("--from", dest="start", default="head",
                       help="head (default), tail or a stream cut text")  # fmt: skip
    gread = add(verbs, "read", _run(readergroup_read), "Read as a member of the group.",
                parents=parents)  # fmt: skip
    gread.add_argument("name", metavar="SCOPE/GROUP")
    gread.add_argument("--reader", help="reader id (default: a new random one)")
    gread.add_argument("--limit", type=int, default=0, help="stop after N events")
    gread.add_argument(
        "--idle", type=float, default=0,
        help="stop after this many seconds without an event (default: never)",
    )  # fmt: skip


def add_spark_commands(commands: Any, add: Any, data_dir: argparse.ArgumentParser) -> None:
    """``millrace ingest`` and ``millrace export``: the Spark jobs of ``spark_bridge.jobs`` on
    a local Spark, or the ``spark-submit`` line that runs them on a cluster."""
    common = _common()
    parents = [data_dir, common]
    ingest = add(commands, "ingest", _run(spark_ingest),
                 "Load Parquet, CSV or JSON files into a stream, exactly once (local Spark).",
                 parents=parents)  # fmt: skip
    ingest.add_argument("paths", nargs="+", metavar="PATH")
    ingest.add_argument("--stream", required=True, metavar="SCOPE/STREAM")
    ingest.add_argument("--format", default="parquet", choices=("parquet", "csv", "json"))
    ingest.add_argument("--key-column", help="the routing key's column")
    ingest.add_argument("--event-column", help="the event's column (default: the row as JSON)")
    ingest.add_argument("--create", action="store_true", help="create the scope and stream")
    ingest.add_argument("--segments", type=int, default=1, help="a created stream's segments")
    export = add(commands, "export", _run(spark_export),
                 "Write a stream, or the part between two cuts, out as files (local Spark).",
                 parents=parents)  # fmt: skip
    export.add_argument("name", metavar="SCOPE/STREAM")
    export.add_argument("--to", required=True, metavar="DIR")
    export.add_argument("--from", dest="start", default="earliest", help="a stream cut text")
    export.add_argument("--until", dest="end", default="unbounded", help="a stream cut text")
    export.add_argument("--format", default="parquet", choices=("parquet", "json", "csv"))
    for command in (ingest, export):
        command.add_argument("--master", help="Spark master (default local[*])")
        command.add_argument("--spark-submit", action="store_true",
                             help="print the spark-submit line for a cluster instead")  # fmt: skip


def _job_argv(args: argparse.Namespace, *rest: str) -> list[str]:
    argv = ["--controller", _url(args), *rest]
    if args.master:
        argv += ["--master", args.master]
    return argv


def _run_job(args: argparse.Namespace, module: str, argv: list[str]) -> None:
    import importlib
    import shlex

    job = importlib.import_module(f"spark_bridge.jobs.{module}")
    if args.spark_submit:  # the cluster's Python needs Millrace installed, as here
        path = Path(job.__file__ or module)
        shown = [a if a != _token(args) else "TOKEN" for a in argv]
        line = shlex.join(["spark-submit", str(path), *shown])
        print(line.replace(" TOKEN", ' "$MILLRACE_TOKEN"'))
        return
    code = job.main(argv)
    if code:
        raise AdminError(f"the {module} job failed (exit status {code})")


def spark_ingest(args: argparse.Namespace) -> None:
    _split(args.stream)
    rest = ["--token", _token(args), "--stream", args.stream, "--format", args.format,
            "--segments", str(args.segments)]  # fmt: skip
    if args.key_column:
        rest += ["--key-column", args.key_column]
    if args.event_column:
        rest += ["--event-column", args.event_column]
    if args.create:
        rest.append("--create")
    _run_job(args, "ingest", _job_argv(args, *rest, *args.paths))


def spark_export(args: argparse.Namespace) -> None:
    _split(args.name)
    rest = ["--token", _token(args), "--stream", args.name, "--to", args.to,
            "--from", args.start, "--until", args.end, "--format", args.format]  # fmt: skip
    _run_job(args, "export", _job_argv(args, *rest))


def _run(handler: Any, rest: bool = False) -> Any:
    """A cli.Handler around an admin command (``AdminError`` is caught by ``cli.main``). With
    ``rest``, the handler also gets the arguments argparse left over (events placed after an
    option)."""

    def run(args: argparse.Namespace, left: list[str]) -> int:
        handler(args, left) if rest else handler(args)
        return 0

    return run
