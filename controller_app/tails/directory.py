"""What the WebSocket tail consumers need to know of streams, as an interface they own.

The consumers serve reads; the stream metadata (which segments a stream has, where each is
served, what follows a sealed one) is the controller's. ``StreamDirectory`` is the small
interface through which they ask for it (ADR 0004), so the consumers know nothing of the
controller's models; the controller provides the implementation
(``controller_app.stream_directory.ControllerStreamDirectory``) and ``millrace.project.asgi``
wires it in. Its methods are blocking (they query a database); the consumers call them in a
thread.
"""

from __future__ import annotations

from typing import Any, Protocol

from millrace.client.follower import Target

#: Where a stream subscription starts: ``head``, ``tail`` (the current segments, at offset 0
#: here; the consumer asks the segment store for their lengths), ``time`` (ms since the
#: epoch), ``cut`` (a stream cut) or ``position`` (the segments a reader was still reading).
START_KINDS = ("head", "tail", "time", "cut", "position")


class StreamNotFoundError(LookupError):
    """The stream does not exist (or no longer)."""


class NoNodeError(LookupError):
    """No segment store node serves the segment's container."""


class StreamDirectory(Protocol):
    def start_position(
        self, scope: str, stream: str, kind: str, value: object
    ) -> dict[Target, int]:
        """The segments to read from, at their offsets, for a start of ``kind``
        (``START_KINDS``; ``value``: the time in ms, or ``{segment id: offset}``).
        ``StreamNotFoundError``, or ``ValueError`` with the reason for a bad start."""

    def successors(
        self, scope: str, stream: str, segment_id: int
    ) -> tuple[dict[Target, list[int]], bool]:
        """The successors of a segment read to its end (each with its predecessors' ids), and
        whether the stream has ended (sealed or being deleted: no successor will come)."""

    def watermark(self, scope: str, stream: str) -> dict[str, Any] | None:
        """The stream's newest watermark as REST shows it (``number``, ``lowerTimeBound``,
        ``upperTimeBound``, ``streamCut``), ``None`` while it has none or is gone."""

    def segment_target(self, name: str) -> Target:
        """Where the segment with qualified name ``name`` is served. ``ValueError`` for a name
        that is not one, ``NoNodeError`` when no node serves it."""

    def may_read(self, user: Any) -> bool:
        """Whether ``user`` (the connection's Django user) may read streams: its role allows
        it, or authentication is off. Called in a worker thread (it may query)."""
