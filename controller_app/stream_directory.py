"""The controller's side of ``controller_app.tails.directory.StreamDirectory``.

Answers the WebSocket tail consumers' questions about streams from the controller's metadata
(selectors only; no writes), so the consumers need not import the controller (ADR 0004).
"""

from __future__ import annotations

from typing import Any

from controller_app import selectors as sel
from controller_app.choices import StreamState
from controller_app.errors import ControllerError, NoNodeForSegmentError
from controller_app.models import Stream, Watermark
from controller_app.roles import may
from controller_app.tails.directory import NoNodeError, StreamNotFoundError
from millrace.client.follower import Target
from millrace.kernel.naming import parse_segment_name

#: Stream states in which no successor will ever be added.
_ENDED = (StreamState.SEALED, StreamState.SEALING, StreamState.DELETING)


class ControllerStreamDirectory:
    """``StreamDirectory`` over the controller's database."""

    def start_position(
        self, scope: str, stream: str, kind: str, value: object
    ) -> dict[Target, int]:
        found = self._stream(scope, stream)
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

    def successors(
        self, scope: str, stream: str, segment_id: int
    ) -> tuple[dict[Target, list[int]], bool]:
        try:
            found = self._stream(scope, stream)
        except StreamNotFoundError:
            return {}, True  # deleted
        successors = sel.successors(found, segment_id)
        count = sel.container_count()
        targets = {_target(found, s.id, count): preds for s, preds in successors.items()}
        return targets, found.state in _ENDED

    def watermark(self, scope: str, stream: str) -> dict[str, Any] | None:
        try:
            found = self._stream(scope, stream)
        except StreamNotFoundError:
            return None
        newest = Watermark.objects.filter(stream=found).order_by("-number").first()
        return None if newest is None else newest.as_json()

    def may_read(self, user: Any) -> bool:
        return may(user, "read")

    def segment_target(self, name: str) -> Target:
        _, _, segment_id = parse_segment_name(name)
        try:
            uri = sel.node_uri(name)
        except NoNodeForSegmentError as exc:
            raise NoNodeError(str(exc)) from exc
        return Target(name, segment_id, uri.host, uri.port)

    @staticmethod
    def _stream(scope: str, stream: str) -> Stream:
        try:
            return sel.get_stream(scope, stream)
        except Stream.DoesNotExist:
            raise StreamNotFoundError(f"stream {scope}/{stream} does not exist") from None


def _target(stream: Any, segment_id: int, count: int) -> Target:
    uri = sel.segment_uri(stream, segment_id, count)
    return Target(sel.segment_name(stream, segment_id), segment_id, uri.host, uri.port)
