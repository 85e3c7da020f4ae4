"""Reading records out of one ledger file, and telling a torn tail from corruption.

Responsibility: ``RecordScanner`` walks the records of a ledger between two byte offsets through a
bounded read window (never the whole file in memory) and checks each one (length, CRC32C,
sequence). ``find_valid_end`` is what ``open`` runs on the ledger the previous owner may have
been writing: a bad record that nothing valid follows is the torn tail of a crash (the write
was never acknowledged, since acknowledgement follows fdatasync) and marks the end; a bad record
followed by its valid successor is corruption of acknowledged data and raises.
"""

from __future__ import annotations

import os

from tiers.base import DataLogCorruptionError
from tiers.file.format import RECORD, record_crc

__all__ = ["BadRecord", "RecordScanner", "find_valid_end"]

#: Bytes read at once when walking small records.
WINDOW_BYTES = 1024 * 1024
#: Payloads at least this large are read on their own, straight into the bytes returned.
DIRECT_READ_BYTES = 256 * 1024
_SEQUENCE_OFFSET = 8  # where the u64 sequence sits inside a record header


class BadRecord(Exception):
    """The record at ``offset`` is missing, cut short or fails its checks."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} at byte offset {offset}")
        self.offset = offset
        self.reason = reason

    def corruption(self, path: str) -> DataLogCorruptionError:
        return DataLogCorruptionError(f"{path}: {self.reason} at byte offset {self.offset}")


def pread_exact(fd: int, length: int, offset: int) -> bytes:
    """Up to ``length`` bytes at ``offset``: fewer only where the file ends."""
    data = os.pread(fd, length, offset)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class RecordScanner:
    """Walks the records of one ledger file in ``[offset, limit)``."""

    def __init__(
        self, fd: int, offset: int, limit: int, expected_sequence: int, *, verify_crc: bool = True
    ) -> None:
        self.fd = fd
        #: Offset of the next record.
        self.position = offset
        self.limit = limit
        #: Sequence the next record must carry.
        self.expected_sequence = expected_sequence
        #: TEST-ONLY switch: False skips the CRC32C check (the acceptance tests' "no-crc" run).
        self.verify_crc = verify_crc
        self._buffer = b""
        self._buffer_start = offset

    def next(self) -> tuple[int, int, bytes] | None:
        """The next record as ``(offset, sequence, payload)``, or None at ``limit``.

        Raises ``BadRecord`` (and does not move) when the record there is not valid.
        """
        position = self.position
        if position >= self.limit:
            return None
        header, index = self._load(position, RECORD.size)
        if len(header) - index < RECORD.size:
            raise BadRecord(position, "record header cut short")
        length, crc, sequence = RECORD.unpack_from(header, index)
        end = position + RECORD.size + length
        if length == 0 or end > self.limit:
            raise BadRecord(position, f"record length {length} runs past byte {self.limit}")
        payload = self._payload(position + RECORD.size, length)
        if len(payload) != length:
            raise BadRecord(position, "record cut short by the end of the file")
        if self.verify_crc and record_crc(length, sequence, payload) != crc:
            raise BadRecord(position, "CRC32C mismatch")
        if sequence != self.expected_sequence:
            raise BadRecord(position, f"sequence {sequence} where {self.expected_sequence} was due")
        self.position = end
        self.expected_sequence = sequence + 1
        return position, sequence, payload

    def _payload(self, offset: int, length: int) -> bytes:
        if length >= DIRECT_READ_BYTES:
            return pread_exact(self.fd, length, offset)
        data, index = self._load(offset, length)
        if index == 0 and len(data) == length:
            return data
        return data[index : index + length]

    def _load(self, offset: int, length: int) -> tuple[bytes, int]:
        """A buffer holding ``[offset, offset + length)`` (if the file has it) and the index."""
        index = offset - self._buffer_start
        if index >= 0 and index + length <= len(self._buffer):
            return self._buffer, index
        size = min(self.limit - offset, max(WINDOW_BYTES, length))
        self._buffer = pread_exact(self.fd, size, offset)
        self._buffer_start = offset
        return self._buffer, 0


def find_valid_end(
    fd: int, path: str, offset: int, first_sequence: int, *, verify_crc: bool = True
) -> tuple[int, int]:
    """Scan a ledger that may end in a torn write; return ``(valid end, next sequence)``.

    The scan stops at the file's size when it starts: bytes a live writer adds meanwhile are
    past the end the caller fences at. ``verify_crc=False`` is for tests only.
    """
    limit = os.fstat(fd).st_size
    scanner = RecordScanner(fd, offset, limit, first_sequence, verify_crc=verify_crc)
    while True:
        try:
            if scanner.next() is None:
                break
        except BadRecord as bad:
            successor = _find_record(fd, bad.offset + 1, limit, scanner.expected_sequence + 1)
            if successor is not None:
                raise DataLogCorruptionError(
                    f"{path}: {bad.reason} at byte offset {bad.offset}, followed by a valid "
                    f"record at byte offset {successor}: acknowledged data is damaged"
                ) from None
            break  # a torn tail: never acknowledged
    return scanner.position, scanner.expected_sequence


def _find_record(fd: int, start: int, limit: int, sequence: int) -> int | None:
    """Offset of a valid record carrying ``sequence`` in ``[start, limit)``, if any."""
    pattern = sequence.to_bytes(8, "little")
    position = start + _SEQUENCE_OFFSET
    while position < limit:
        window = pread_exact(fd, min(WINDOW_BYTES, limit - position), position)
        if not window:
            return None
        index = window.find(pattern)
        while index != -1:
            candidate = position + index - _SEQUENCE_OFFSET
            if _is_valid_record(fd, candidate, limit, sequence):
                return candidate
            index = window.find(pattern, index + 1)
        position += max(1, len(window) - len(pattern) + 1)
    return None


def _is_valid_record(fd: int, offset: int, limit: int, sequence: int) -> bool:
    try:
        return RecordScanner(fd, offset, limit, sequence).next() is not None
    except BadRecord:
        return False
