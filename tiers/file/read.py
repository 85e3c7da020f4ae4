"""Reading the file log back: the ledgers the manifest lists, in order, from the truncation on.

Responsibility: turn a manifest (and the current ledger's acknowledged end) into spans of
ledger files to walk, and walk them in bounded steps (``read_all`` of the durable data log),
checking each ledger's header and each record's sequence and CRC. A step never reads past a
sealed length or the acknowledged end, so bytes a fenced owner wrote after the seal are never
read. Nothing here writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable

from tiers.base import DataLogCorruptionError, LogAddress
from tiers.file import format as fmt
from tiers.file.scan import BadRecord, RecordScanner, pread_exact

__all__ = ["Cursor", "LedgerReader", "check_header"]


@dataclasses.dataclass(slots=True)
class _Span:
    """Part of one ledger a reader walks."""

    path: str
    ledger: fmt.LedgerEntry
    start: int
    limit: int
    first_sequence: int


@dataclasses.dataclass(slots=True)
class Cursor:
    """Where a read of the log stands between two steps."""

    spans: list[_Span]
    skip_through: int
    index: int = 0
    position: int | None = None
    expected_sequence: int = 0


def check_header(fd: int, path: str, entry: fmt.LedgerEntry) -> None:
    """Raise ``DataLogCorruptionError`` unless the ledger file's header is what ``entry`` says."""
    header = fmt.decode_ledger_header(pread_exact(fd, fmt.LEDGER_HEADER_SIZE, 0), path)
    expected = fmt.LedgerHeader(entry.epoch, entry.id, entry.first_sequence)
    if header != expected:
        raise DataLogCorruptionError(
            f"{path}: ledger header at byte offset 0 is {header}, manifest says {expected}"
        )


class LedgerReader:
    """Reads of one log, at most ``frames_max`` frames and ``bytes_max`` bytes a step."""

    def __init__(self, frames_max: int, bytes_max: int, verify_crc: bool) -> None:
        self.frames_max = frames_max
        self.bytes_max = bytes_max
        self.verify_crc = verify_crc  # False only in tests (corrupt bytes are read)

    def start(
        self, manifest: fmt.Manifest, live_end: int, ledger_path: Callable[[int], str]
    ) -> Cursor:
        """A read of every record after the truncation: the unsealed ledger up to ``live_end``."""
        truncation = manifest.truncation
        skip = truncation.sequence if truncation is not None else 0
        spans = []
        for entry in manifest.ledgers:
            limit = entry.sealed_length if entry.sealed_length is not None else live_end
            if entry.wholly_at_or_below(skip):
                continue  # wholly truncated
            span = _Span(ledger_path(entry.id), entry, 0, limit, entry.first_sequence)
            if truncation is not None and truncation.ledger == entry.id:
                self._skip_to(span, truncation)
            spans.append(span)
        return Cursor(spans, skip)

    def read_batch(self, cursor: Cursor) -> tuple[list[tuple[LogAddress, bytes]], Cursor | None]:
        """The next step's records, and the cursor of the step after (``None``: all read)."""
        batch: list[tuple[LogAddress, bytes]] = []
        size = 0
        while cursor.index < len(cursor.spans):
            if len(batch) >= self.frames_max or size >= self.bytes_max:
                return batch, cursor
            size += self._read_span(cursor, batch, size)
        return batch, None

    def _skip_to(self, span: _Span, truncation: LogAddress) -> None:
        """Start ``span`` at the truncation address when a record there carries its sequence."""
        if not fmt.LEDGER_HEADER_SIZE <= truncation.offset < span.limit:
            return
        fd = os.open(span.path, os.O_RDONLY)
        try:
            scanner = RecordScanner(
                fd, truncation.offset, span.limit, truncation.sequence, verify_crc=self.verify_crc
            )
            with contextlib.suppress(BadRecord):
                if scanner.next() is not None:
                    span.start = truncation.offset
                    span.first_sequence = truncation.sequence
        finally:
            os.close(fd)

    def _read_span(self, cursor: Cursor, batch: list[tuple[LogAddress, bytes]], size: int) -> int:
        """Read records of the current span into ``batch``; return the bytes added."""
        span = cursor.spans[cursor.index]
        try:
            fd = os.open(span.path, os.O_RDONLY)
        except FileNotFoundError:
            raise DataLogCorruptionError(f"{span.path}: ledger file missing") from None
        added = 0
        try:
            if cursor.position is None:
                if span.start == 0:
                    check_header(fd, span.path, span.ledger)
                cursor.position = span.start or fmt.LEDGER_HEADER_SIZE
                cursor.expected_sequence = span.first_sequence
            scanner = RecordScanner(
                fd,
                cursor.position,
                span.limit,
                cursor.expected_sequence,
                verify_crc=self.verify_crc,
            )
            while len(batch) < self.frames_max:
                if size + added >= self.bytes_max:
                    break
                record = scanner.next()
                if record is None:
                    cursor.index += 1
                    cursor.position = None
                    return added
                offset, sequence, payload = record
                if sequence > cursor.skip_through:
                    batch.append((LogAddress(sequence, span.ledger.id, offset), payload))
                    added += len(payload)
            cursor.position = scanner.position
            cursor.expected_sequence = scanner.expected_sequence
            return added
        except BadRecord as bad:
            raise bad.corruption(span.path) from None
        finally:
            os.close(fd)
