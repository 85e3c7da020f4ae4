"""``millrace stream create|list|info|schema|seal|delete|scale|truncate|append|read``.

``stream schema`` shows a stream's value subject and schema enforcement, or sets them; ``stream
read --decode`` prints events decoded by their schemas, as JSON.

``stream append`` writes its arguments, or one event per line of standard input (with a
progress bar), through the Python client; ``stream read`` follows the stream over the WebSocket
tail read and prints one event per line until ``--limit`` events or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import sys
from typing import Any
from urllib.parse import quote

from millrace.kernel.schema_policy import MODES
from millrace.ops.cli import remote
from millrace.ops.cli.base import CommandError, Parents


def register(commands: Any, parents: Parents) -> None:
    add = remote.command
    data_dir = parents.data_dir
    parents_ = [data_dir, remote.options()]
    stream = add(commands, "stream", None, "Manage, write and read streams.", parents=[data_dir])
    verbs = stream.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = add(
        verbs, "create", remote.handler(stream_create), "Create SCOPE/STREAM.", parents=parents_
    )
    create.add_argument("name", metavar="SCOPE/STREAM")
    create.add_argument("--segments", type=int, default=1, help="initial segments (default 1)")
    create.add_argument("--tag", action="append", help="a tag (repeat for more)")
    _schema_options(create)
    add(verbs, "list", remote.handler(stream_list), "List the streams of SCOPE.", parents=parents_
        ).add_argument("scope")  # fmt: skip
    for verb, handler, summary in (
        ("info", stream_info, "State, epoch, tags and current segments."),
        ("seal", stream_seal, "Seal: no more writes."),
        ("delete", stream_delete, "Delete a sealed stream."),
    ):
        add(verbs, verb, remote.handler(handler), summary, parents=parents_).add_argument(
            "name", metavar="SCOPE/STREAM"
        )
    schema = add(verbs, "schema", remote.handler(stream_schema),
                 "Show or set the stream's value subject and schema enforcement.",
                 parents=parents_)  # fmt: skip
    schema.add_argument("name", metavar="SCOPE/STREAM")
    _schema_options(schema)
    scale = add(
        verbs, "scale", remote.handler(stream_scale), "Split or merge segments.", parents=parents_
    )
    scale.add_argument("name", metavar="SCOPE/STREAM")
    scale.add_argument("--seal", required=True, help="segment ids to seal, comma-separated")
    scale.add_argument("--ranges", required=True, help="new key ranges: 0.5-0.75,0.75-1.0")
    add(verbs, "rekey", remote.handler(stream_rekey),
        "Merge every segment into one and split it back: events written from now on are read"
        " after all written before (per-key order across a routing change; docs/decisions/0012).",
        parents=parents_).add_argument("name", metavar="SCOPE/STREAM")  # fmt: skip
    trunc = add(verbs, "truncate", remote.handler(stream_truncate), "Truncate at a stream cut.",
                parents=parents_)  # fmt: skip
    trunc.add_argument("name", metavar="SCOPE/STREAM")
    trunc.add_argument("--cut", required=True, help="ID=OFFSET,ID=OFFSET")
    append = add(verbs, "append", remote.handler(stream_append, rest=True),
                 "Append events (arguments or stdin lines).", parents=parents_,
                 passthrough="the events")  # fmt: skip
    append.add_argument("name", metavar="SCOPE/STREAM")
    append.add_argument("events", nargs="*", help="events (default: one per line of stdin)")
    append.add_argument("--key", help="routing key of every event")
    read = add(verbs, "read", remote.handler(stream_read),
               "Follow a stream: print events as they come.", parents=parents_)  # fmt: skip
    read.add_argument("name", metavar="SCOPE/STREAM")
    read.add_argument("--from", dest="start", default="head",
                      help="head (default), tail, time:<ms> or cut:<id>=<offset>,...")  # fmt: skip
    read.add_argument("--limit", type=int, default=0, help="stop after N events")
    read.add_argument(
        "--decode", action="store_true",
        help="print each event's value as JSON, decoded by the schema its header names",
    )  # fmt: skip


def _schema_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--subject", help="its value subject ('': <scope>.<stream>-value)")
    parser.add_argument(
        "--enforcement", choices=MODES,
        help="none: appends are not looked at; header: each event starts with the id of a "
        "schema of the subject; validate: and decodes with it",
    )  # fmt: skip


def _schema_change(args: argparse.Namespace) -> dict[str, str]:
    return {k: v for k, v in (("subject", args.subject), ("enforcement", args.enforcement))
            if v is not None}  # fmt: skip


def stream_create(args: argparse.Namespace) -> None:
    scope, stream = remote.split(args.name)
    body = {
        "streamName": stream,
        "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": args.segments},
        "streamTags": args.tag or [],
    }
    binding = _schema_change(args)
    if binding:
        body["schema"] = binding
    made = remote.admin(args, lambda a: a.create_stream(scope, body), exists_ok=True)
    if made is None:  # (as Pravega's createStream: false, not an error; its state is told)
        info = remote.admin(args, lambda a: a.stream_info(scope, stream))
        said = f"{args.name} exists already ({info['state'].lower()}; nothing changed)"
        remote.out(args, {"streamName": stream, "created": False, "state": info["state"]}, said)
    else:
        remote.out(args, made, f"created {args.name} with {args.segments} segment(s)")


def stream_list(args: argparse.Namespace) -> None:
    found = remote.admin(args, lambda a: a.list_streams(args.scope))
    remote.out(args, found, "\n".join(s["streamName"] for s in found["streams"]))


def stream_info(args: argparse.Namespace) -> None:
    scope, stream = remote.split(args.name)
    info = remote.admin(args, lambda a: a.stream_info(scope, stream))
    segments = remote.admin(args, lambda a: a.segments(scope, stream))
    info["segments"] = segments
    lines = [f"{args.name}: {info['state']}, epoch {info['currentEpoch']}, tags {info['tags']}"]
    lines += [
        f"  segment {s['segmentId']} ({s['name']}): keys [{s['keyStart']}, {s['keyEnd']})"
        for s in segments
    ]
    remote.out(args, info, "\n".join(lines))


def stream_schema(args: argparse.Namespace) -> None:
    scope, stream = remote.split(args.name)
    change = _schema_change(args)
    binding = remote.admin(args, lambda a: a.stream_schema(scope, stream, change))
    said = f"{args.name}: subject {binding['subject']}, enforcement {binding['enforcement']}"
    remote.out(args, binding, said)


def stream_seal(args: argparse.Namespace) -> None:
    scope, stream = remote.split(args.name)
    remote.out(args, remote.admin(args, lambda a: a.seal_stream(scope, stream)), "sealed")


def stream_delete(args: argparse.Namespace) -> None:
    scope, stream = remote.split(args.name)
    remote.admin(args, lambda a: a.delete_stream(scope, stream))
    remote.out(args, {"deleted": args.name}, f"deleted {args.name}")


def _ranges(text: str) -> list[list[float]]:
    try:
        return [[float(x) for x in part.split("-", 1)] for part in text.split(",")]
    except ValueError:
        raise CommandError(f"ranges are START-END,START-END, not {text!r}") from None


def stream_scale(args: argparse.Namespace) -> None:
    scope, stream = remote.split(args.name)
    try:
        sealed = [int(x) for x in args.seal.split(",")]
    except ValueError:
        raise CommandError(f"--seal takes segment ids, not {args.seal!r}") from None
    ranges = _ranges(args.ranges)
    done = remote.admin(args, lambda a: a.scale_stream(scope, stream, sealed, ranges))
    remote.out(args, done, f"epoch {done['epoch']}: {len(done['segments'])} segment(s)")


def stream_rekey(args: argparse.Namespace) -> None:
    """Two scales: all current segments into one (it follows every one of them, so readers
    finish them first), then that one back into the same key ranges."""
    scope, stream = remote.split(args.name)
    before = remote.admin(args, lambda a: a.segments(scope, stream))
    ranges = [[s["keyStart"], s["keyEnd"]] for s in before]
    sealed = [s["segmentId"] for s in before]
    merged = remote.admin(args, lambda a: a.scale_stream(scope, stream, sealed, [[0.0, 1.0]]))
    (one,) = merged["segments"]
    again = [one["segmentId"]]
    done = remote.admin(args, lambda a: a.scale_stream(scope, stream, again, ranges))
    said = f"epoch {done['epoch']}: {len(done['segments'])} segment(s) over the same key ranges"
    remote.out(args, done, said + "; events written from now on are read after all before")


def stream_truncate(args: argparse.Namespace) -> None:
    scope, stream = remote.split(args.name)
    try:
        cut = dict(part.split("=", 1) for part in args.cut.split(","))
        cut = {str(int(k)): int(v) for k, v in cut.items()}
    except ValueError:
        raise CommandError(f"--cut takes ID=OFFSET,ID=OFFSET, not {args.cut!r}") from None
    done = remote.admin(args, lambda a: a.truncate_stream(scope, stream, cut))
    remote.out(args, done, "truncated")


def stream_append(args: argparse.Namespace, rest: list[str] | None = None) -> None:

    scope, stream = remote.split(args.name)
    unknown = [x for x in rest or () if x.startswith("-")]
    if unknown:
        raise CommandError(f"unrecognized option {unknown[0]}")
    events = [*args.events, *(rest or ())] or None
    # (imported when the command runs: ``millrace --help`` and the node's processes skip the SDK)
    from tqdm import tqdm

    from millrace.client.manager import StreamManager

    manager = StreamManager(remote.url(args), token=remote.token(args), tls_ca=remote.ca(args))
    try:
        writer = manager.create_writer(scope, stream)
        count = 0
        if events is None:
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
        raise CommandError(f"{type(exc).__name__}: {exc}") from None
    finally:
        manager.close()
    remote.out(args, {"appended": count}, f"appended {count} event(s), durable")


def stream_read(args: argparse.Namespace) -> None:
    scope, stream = remote.split(args.name)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_tail(args, scope, stream))


async def _tail(args: argparse.Namespace, scope: str, stream: str) -> None:
    """Follow the stream over a WebSocket of the first controller that answers (given
    several, the next one when a connection cannot be made)."""
    import websockets

    from millrace.kernel.tls import explain

    failures = []
    for base in remote.urls(args):
        ws_base = base.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        query = f"from={quote(args.start)}&encoding=utf-8" + ("&decode=json" if args.decode else "")
        uri = f"{ws_base}/ws/streams/{quote(scope)}/{quote(stream)}?{query}"
        try:
            await _follow(args, uri, base)
            return
        except _Unreachable as exc:
            failures.append(str(exc))
        except (OSError, websockets.WebSocketException) as exc:
            where = f"WebSocket {uri.split('?')[0]}"
            raise CommandError(explain(exc, where) or f"{where}: {exc}") from None
    raise CommandError("; ".join(failures))


class _Unreachable(Exception):
    """The controller's WebSocket could not be opened (the next one is tried)."""


async def _follow(args: argparse.Namespace, uri: str, base: str) -> None:
    import websockets

    from millrace.kernel.tls import explain

    headers = {"Authorization": f"Token {remote.token(args)}"}
    seen = 0
    try:
        connection = await websockets.connect(
            uri, additional_headers=headers, origin=base, ssl=remote.ws_tls(args, uri)
        )
    except (OSError, TimeoutError) as exc:
        where = f"WebSocket {uri.split('?')[0]}"
        raise _Unreachable(explain(exc, where) or f"{where}: {exc}") from None
    async with connection as ws:
        async for raw in ws:
            message = json.loads(raw)
            if message["type"] == "error":
                raise CommandError(f"{message['code']}: {message['message']}")
            if message["type"] == "end":
                return
            for event in message.get("events", ()):
                text = event.get("text")
                if args.decode:
                    text = json.dumps(event["value"]) if "value" in event else (
                        f"(undecodable: {event.get('decodeError')})")  # fmt: skip
                elif text is None:
                    text = base64.b64decode(event["data"]).decode("utf-8", "replace")
                if args.json:
                    print(json.dumps({"segment": message["segment"], **event}), flush=True)
                else:
                    print(text, flush=True)
                seen += 1
                if args.limit and seen >= args.limit:
                    return
