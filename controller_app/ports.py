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

from millrace.kernel import wire

__all__ = [
    "NOT_EXISTS",
    "NO_VERSION",
    "EntryPage",
    "SegmentState",
    "SegmentStorePort",
    "StoredEntry",
    "TableStorePort",
]

#: A table change's version condition: none (whatever the key's version is), or that the key is
#: absent (the wire protocol's values).
NO_VERSION = wire.KEY_NO_VERSION
NOT_EXISTS = wire.KEY_NOT_EXISTS


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
    #: Events and bytes (headers counted) appended since the node started.
    events_total: int = 0
    bytes_total: int = 0


@dataclass(frozen=True)
class Traffic:
    """The monitors' view: per qualified segment name, and how long the monitor whose segments
    are missing has been up (a segment it never saw written to had no traffic that long)."""

    segments: Mapping[str, SegmentTraffic]
    uptime_s: float


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """An entry of a table segment: its whole key, value and version."""

    key: bytes
    value: bytes
    version: int


@dataclass(frozen=True, slots=True)
class EntryPage:
    """Entries of a table segment in key order, and the token to go on with (the same token
    when nothing was left)."""

    entries: list[StoredEntry]
    token: bytes


class TableStorePort(SegmentStorePort, Protocol):
    """The segment store port with the entry calls of one table segment (the REST API's and
    the console's entries of key-value tables). A refused condition is the controller's
    ``BadKeyVersionError`` (the key is at another version, or present where it had to be
    absent) or ``KeyNotFoundError``; a key or value the segment refuses ``InvalidArgumentError``.
    """

    def table_get(self, segment: str, key: bytes) -> StoredEntry | None:
        """The entry of ``key``, None when absent."""

    def table_put(self, segment: str, key: bytes, value: bytes, version: int) -> int:
        """Put ``value`` at ``key`` if it is at ``version`` (``NO_VERSION``, ``NOT_EXISTS``);
        its new version."""

    def table_remove(self, segment: str, key: bytes, version: int) -> None:
        """Remove ``key`` if it is at ``version`` (``NO_VERSION``: whatever it is)."""

    def table_page(self, segment: str, limit: int, token: bytes, prefix: bytes) -> EntryPage:
        """Up to ``limit`` entries whose keys start with ``prefix``, after ``token``."""

    def table_counts(self, segment: str) -> tuple[int, int, int]:
        """(start offset, length, entry count) of the table segment."""
