"""The controller's port to the segment store, as the workflows see it.

Responsibility: ``SegmentStorePort`` is what a workflow may ask of the segment store (create, seal,
truncate, delete and merge segments, read bytes, a segment's state), with the idempotence a
retried step needs, raising the controller's own ``SegmentStoreUnavailableError`` when the store
cannot be reached. Workflows receive one as their first argument; the edges that call them
(the Celery tasks, the REST views) pass ``segment_client.segment_store()``, the process's
implementation over the wire client, and tests may pass any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["SegmentState", "SegmentStorePort"]


@dataclass(frozen=True)
class SegmentState:
    """What the segment store says of a segment."""

    exists: bool
    sealed: bool
    length: int
    start_offset: int
    #: When the segment last changed (ms since the Unix epoch; 0: not known).
    last_modified_ms: int = 0


class SegmentStorePort(Protocol):
    """Blocking segment operations (see the module's docstring)."""

    def create_segment(self, segment: str) -> None:
        """Create ``segment`` (existing already is fine)."""

    def seal(self, segment: str) -> int:
        """Seal ``segment`` (sealed already is fine); its final length."""

    def truncate(self, segment: str, offset: int) -> None:
        """Drop the bytes of ``segment`` before ``offset``."""

    def delete(self, segment: str) -> None:
        """Delete ``segment`` (missing already is fine)."""

    def merge(self, target: str, source: str) -> None:
        """Merge transaction segment ``source`` into ``target`` (merged already is fine)."""

    def merge_all(self, merges: Sequence[tuple[str, str]]) -> None:
        """``merge(target, source)`` for each pair, side by side (each target once at most)."""

    def create_all(self, segments: Sequence[str]) -> None:
        """``create_segment`` for each, side by side."""

    def read(self, segment: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of ``segment`` at ``offset`` (below its length)."""

    def create_table(self, segment: str) -> None:
        """Create table segment ``segment`` (existing already is fine)."""

    def delete_table(self, segment: str) -> None:
        """Delete table segment ``segment``, whatever it holds (missing already is fine)."""

    def info(self, segment: str) -> SegmentState:
        """The segment's state (a missing segment: ``exists`` False)."""

    def locate(self, segment: str, target: int) -> int:
        """The first event boundary of ``segment`` at or after ``target`` (its length when
        none is below it)."""


@dataclass(frozen=True)
class SegmentTraffic:
    """What a node's traffic monitor says of one segment."""

    events_per_s: float
    bytes_per_s: float
    #: How long the monitor has measured it (seconds).
    seen_s: float


@dataclass(frozen=True)
class Traffic:
    """The monitors' view: per qualified segment name, and how long the monitor whose segments
    are missing has been up (a segment it never saw written to had no traffic that long)."""

    segments: Mapping[str, SegmentTraffic]
    uptime_s: float
