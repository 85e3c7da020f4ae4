"""What the tests do to a stopped node's tier-1 files: power loss, bit flips, finding records.

Responsibility: read and damage the file tier-1 (``tiers/file``: a directory per container with
``ledger-<id>.log`` files of records) the way real disks fail, only while no node runs.

Power loss: the node runs with the file tier-1's test-only ``sync_trace`` option, so each
container directory has a ``sync-trace`` file with a ``<ledger> <length>`` line written after
every fdatasync of a ledger and before the batch is acknowledged. ``power_loss`` cuts each
ledger back to the largest length traced for it (the header if none: the model keeps files and
their headers, it loses record bytes), keeps a short random prefix of the bytes that were never
synced (a partly persisted write) and ends the file with a torn record. With fsync off
(``no-fsync``) nothing is ever traced, so that cut loses acknowledged data, as a real power loss
would.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Iterator
from pathlib import Path

from tiers.file import format as fmt
from tiers.file.scan import BadRecord, RecordScanner

__all__ = [
    "Record",
    "flip_bit",
    "ledger_files",
    "power_loss",
    "records",
    "synced_lengths",
]

#: Unsynced bytes a power loss may keep (a partly persisted last write), at most.
KEPT_UNSYNCED_BYTES_MAX = 4096


def container_dirs(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "tier1").glob("container-*"))


def ledger_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "tier1").glob("container-*/ledger-*.log"))


def synced_lengths(log_dir: Path) -> dict[str, int]:
    """Ledger file name -> the most of it ever fdatasynced (from ``sync-trace``)."""
    lengths: dict[str, int] = {}
    trace = log_dir / "sync-trace"
    if trace.exists():
        for line in trace.read_text().splitlines():
            name, _, length = line.partition(" ")
            lengths[name] = max(lengths.get(name, 0), int(length))
    return lengths


@dataclasses.dataclass
class PowerLoss:
    """What ``power_loss`` did: files cut and bytes dropped."""

    files: int = 0
    bytes_dropped: int = 0


def power_loss(data_dir: Path, rng: random.Random) -> PowerLoss:
    """Lose every tier-1 byte that was not fdatasynced, and leave torn records behind."""
    result = PowerLoss()
    for log_dir in container_dirs(data_dir):
        synced = synced_lengths(log_dir)
        for path in sorted(log_dir.glob("ledger-*.log")):
            size = path.stat().st_size
            durable = max(synced.get(path.name, 0), fmt.LEDGER_HEADER_SIZE)
            if durable > size:
                raise AssertionError(f"{path}: {durable} bytes synced, file has {size}")
            kept = durable + rng.randrange(min(size - durable, KEPT_UNSYNCED_BYTES_MAX) + 1)
            os.truncate(path, kept)
            with path.open("ab") as file:
                file.write(torn_record(rng))
            result.files += 1
            result.bytes_dropped += size - kept
    return result


def torn_record(rng: random.Random) -> bytes:
    """The start of a record whose write stopped partway: header (maybe cut) and some payload."""
    length = rng.randrange(64, 8192)
    header = fmt.RECORD.pack(length, rng.getrandbits(32), rng.getrandbits(63))
    record = header + rng.randbytes(length)
    return record[: rng.randrange(1, len(record))]


@dataclasses.dataclass(frozen=True)
class Record:
    """One valid tier-1 record: where it is and what it holds."""

    path: Path
    offset: int
    sequence: int
    payload: bytes

    @property
    def payload_offset(self) -> int:
        return self.offset + fmt.RECORD.size


def records(path: Path) -> Iterator[Record]:
    """The valid records of a ledger file, in order, up to the first bad one."""
    with path.open("rb") as file:
        fd = file.fileno()
        header = fmt.decode_ledger_header(os.pread(fd, fmt.LEDGER_HEADER_SIZE, 0), str(path))
        size = os.fstat(fd).st_size
        scanner = RecordScanner(fd, fmt.LEDGER_HEADER_SIZE, size, header.first_sequence)
        while True:
            try:
                record = scanner.next()
            except BadRecord:
                return
            if record is None:
                return
            offset, sequence, payload = record
            yield Record(path, offset, sequence, bytes(payload))


def flip_bit(path: Path, offset: int, bit: int = 0) -> None:
    """Invert one bit of the byte at ``offset``."""
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ (1 << bit)]))
        file.flush()
        os.fsync(file.fileno())


# -- what changed on disk ------------------------------------------------------------------------


def snapshot(data_dir: Path) -> dict[str, bytes]:
    """Every tier-1 and tier-2 file (relative path -> bytes); test traces left out."""
    files = {}
    for tier in ("tier1", "tier2"):
        for path in sorted((data_dir / tier).rglob("*")):
            if path.is_file() and path.name != "sync-trace":
                files[str(path.relative_to(data_dir))] = path.read_bytes()
    return files


def sealed_lengths(data_dir: Path) -> dict[str, int]:
    """Relative ledger path -> the length its manifest sealed it at (sealed ledgers only)."""
    sealed = {}
    for log_dir in container_dirs(data_dir):
        manifest = fmt.decode_manifest((log_dir / "manifest").read_bytes(), str(log_dir))
        for entry in manifest.ledgers:
            if entry.sealed_length is not None:
                path = log_dir / fmt.ledger_file_name(entry.id)
                sealed[str(path.relative_to(data_dir))] = entry.sealed_length
    return sealed


def changes(data_dir: Path, before: dict[str, bytes]) -> tuple[list[str], list[str]]:
    """Compare the tiers with ``before``: (files changed or removed, files added).

    Bytes appended to a sealed ledger past its sealed length are not a change: no reader ever
    looks there (that is where a fenced writer's late writes land).
    """
    after = snapshot(data_dir)
    sealed = sealed_lengths(data_dir)
    changed = []
    for name, old in before.items():
        new = after.get(name)
        if new is None:
            changed.append(f"{name}: removed")
        elif new != old and not (
            name in sealed and new[: len(old)] == old and len(old) >= sealed[name]
        ):
            changed.append(f"{name}: {len(old)} -> {len(new)} bytes, content differs")
    added = [name for name in after if name not in before]
    return changed, added
