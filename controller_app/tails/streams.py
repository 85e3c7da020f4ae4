"""What the WebSocket tails ask of the controller about streams, answered from its metadata
(selectors only; no writes): where a subscription starts, what follows a segment read to its
end, the newest watermark, where a segment is served, who may read.

The tails are part of the controller, so they ask it directly and hear its own errors
(``StreamNotFoundError``, ``NoNodeForSegmentError``; ADR 0004 is superseded). Every function
blocks on the database: the consumers call them in a thread.
"""

from __future__ import annotations

from typing import Any

from controller_app import audit
from controller_app import selectors as sel
from controller_app.access import grants
from controller_app.choices import StreamState
from controller_app.errors import ControllerError, PermissionRefusedError, StreamNotFoundError
from controller_app.models import AuditEntry, Stream, Watermark
from millrace.client.follower import Target
from millrace.kernel.naming import parse_segment_name

__all__ = ["START_KINDS", "may_read", "segment_target", "start_position", "successors",
           "watermark"]  # fmt: skip

#: Where a stream subscription starts: ``head``, ``tail`` (the current segments, at offset 0
#: here; the consumer asks the segment store for their lengths), ``time`` (ms since the
#: epoch), ``cut`` (a stream cut) or ``position`` (the segments a reader was still reading).
START_KINDS = ("head", "tail", "time", "cut", "position")

#: Stream states in which no successor will ever be added.
_ENDED = (StreamState.SEALED, StreamState.SEALING, StreamState.DELETING)


def start_position(scope: str, stream: str, kind: str, value: object) -> dict[Target, int]:
    """The segments to read from, at their offsets, for a start of ``kind`` (``START_KINDS``;
    ``value``: the time in ms, or ``{segment id: offset}``). ``StreamNotFoundError``, or
    ``ValueError`` with the reason for a bad start."""
    found = _stream(scope, stream)
    try:
        if kind == "head":
            cut = sel.head_segments(found)
        elif kind == "tail":
            cut = dict.fromkeys(sel.current_segments(found), 0)
        elif kind == "time":
            cut = sel.segments_at_time(found, int(value))  # type: ignore[call-overload]
        elif kind == "cut":
            cut = sel.validate_stream_cut(found, value)  # type: ignore[arg-type]
        elif kind == "position":
            cut = sel.validate_reading_position(found, value)  # type: ignore[arg-type]
        else:
            raise ValueError(f"unknown start {kind!r}")
    except ControllerError as exc:
        raise ValueError(str(exc)) from exc
    count = sel.container_count()
    return {_target(found, s.id, count): offset for s, offset in cut.items()}


def successors(scope: str, stream: str, segment_id: int) -> tuple[dict[Target, list[int]], bool]:
    """The successors of a segment read to its end (each with its predecessors' ids), and
    whether the stream has ended (sealed or being deleted: no successor will come)."""
    try:
        found = _stream(scope, stream)
    except StreamNotFoundError:
        return {}, True  # deleted
    following = sel.successors(found, segment_id)
    count = sel.container_count()
    targets = {_target(found, s.id, count): preds for s, preds in following.items()}
    return targets, found.state in _ENDED


def watermark(scope: str, stream: str) -> dict[str, Any] | None:
    """The stream's newest watermark as REST shows it (``number``, ``lowerTimeBound``,
    ``upperTimeBound``, ``streamCut``), ``None`` while it has none or is gone."""
    try:
        found = _stream(scope, stream)
    except StreamNotFoundError:
        return None
    newest = Watermark.objects.filter(stream=found).order_by("-number").first()
    return None if newest is None else newest.as_json()


def may_read(user: Any, scope: str, stream: str) -> None:
    """Nothing if ``user`` (the connection's Django user) may read ``scope/stream`` (its grants
    or its role allow READ, or authentication is off); ``PermissionRefusedError`` naming the
    resource if not, audited."""
    try:
        grants.authorize(user, grants.stream_prn(scope, stream), grants.READ)
    except PermissionRefusedError as exc:
        audit.record(
            "tail.read", exc.resource, username=user.get_username() if user else "",
            source=AuditEntry.Source.WEBSOCKET, result=AuditEntry.Result.REFUSED, detail=str(exc),
        )  # fmt: skip
        raise


def segment_target(name: str) -> Target:
    """Where the segment with qualified name ``name`` is served. ``ValueError`` for a name that
    is not one, ``NoNodeForSegmentError`` when no node serves it."""
    _, _, segment_id = parse_segment_name(name)
    uri = sel.node_uri(name)
    return Target(name, segment_id, uri.host, uri.port)


def _stream(scope: str, stream: str) -> Stream:
    try:
        return sel.get_stream(scope, stream)
    except Stream.DoesNotExist:
        raise StreamNotFoundError(f"stream {scope}/{stream} does not exist") from None


def _target(stream: Any, segment_id: int, count: int) -> Target:
    uri = sel.segment_uri(stream, segment_id, count)
    return Target(sel.segment_name(stream, segment_id), segment_id, uri.host, uri.port)
