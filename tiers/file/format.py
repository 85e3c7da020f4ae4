"""Byte formats of the file tier-1: epoch file, manifest, ledger header and records.

Responsibility: encode and decode every byte ``FileDurableDataLog`` puts on disk, each format
versioned (old files are kept as golden test fixtures and must keep decoding). Layouts (all
integers little-endian):

* ``epoch`` file, 16 bytes, rewritten in place (one sector, so atomic):
  magic ``b"MREP"``, u16 version (1), u16 reserved (0), u64 epoch. It is the fence: a writer
  whose epoch is no longer the one stored here must not acknowledge anything.
* ``manifest``: JSON ``{"format": "millrace.file-log.manifest", "version": 1, "epoch": E,
  "truncation": null | [sequence, ledger, offset], "ledgers": [{"id", "epoch",
  "first_sequence", "sealed_length": null | int, "end_sequence": null | int}]}``, replaced
  atomically (tmp + fsync + rename + fsync of the directory). ``sealed_length`` is set once no
  one may write the ledger any more; bytes past it are ignored. ``end_sequence`` is then the
  sequence the next ledger starts with.
* ledger file ``ledger-<id>.log``: a 32-byte header (magic ``b"MRLG"``, u16 version (1),
  u16 header size (32), u64 epoch, u64 ledger id, u64 first sequence), then records.
* record: u32 payload length, u32 CRC32C, u64 sequence, payload. The CRC covers the length and
  sequence fields and the payload, so a flipped length or sequence is caught too.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Sequence
from typing import Any

import crc32c

from tiers.base import DataLogCorruptionError, Frame, Gathered, LogAddress, frame_size

__all__ = [
    "EPOCH_SIZE",
    "LEDGER_HEADER_SIZE",
    "RECORD",
    "LedgerEntry",
    "LedgerHeader",
    "Manifest",
    "decode_epoch",
    "decode_ledger_header",
    "decode_manifest",
    "encode_epoch",
    "encode_ledger_header",
    "encode_manifest",
    "encode_records",
    "ledger_file_name",
    "record_crc",
]

EPOCH_MAGIC = b"MREP"
EPOCH_VERSION = 1
_EPOCH = struct.Struct("<4sHHQ")
EPOCH_SIZE = _EPOCH.size

LEDGER_MAGIC = b"MRLG"
LEDGER_VERSION = 1
_LEDGER_HEADER = struct.Struct("<4sHHQQQ")
LEDGER_HEADER_SIZE = _LEDGER_HEADER.size

#: Record header: payload length, CRC32C, sequence.
RECORD = struct.Struct("<IIQ")
_LENGTH_SEQUENCE = struct.Struct("<IQ")

#: Frames smaller than this are copied into one buffer when encoded; larger ones are written
#: from the caller's buffer (no copy).
GATHER_BYTES = 64 * 1024

MANIFEST_FORMAT = "millrace.file-log.manifest"
MANIFEST_VERSION = 1


def record_crc(length: int, sequence: int, payload: Frame) -> int:
    """CRC32C of a record: its length and sequence fields, then its payload (a buffer, or
    the buffers that are its bytes in order)."""
    crc = crc32c.crc32c(_LENGTH_SEQUENCE.pack(length, sequence))
    for part in payload if isinstance(payload, list) else (payload,):
        crc = crc32c.crc32c(part, crc)
    return crc


def encode_records(
    frames: Sequence[Frame], sequence: int, ledger: int, offset: int
) -> tuple[list[bytes | memoryview], list[LogAddress], int]:
    """Records for ``frames`` (each a buffer or ``FrameParts``): buffers to write, their
    addresses and the total size. Small pieces are gathered into one buffer; a piece of
    ``GATHER_BYTES`` or more is written from where it is."""
    gathered = Gathered(GATHER_BYTES)
    addresses = []
    start = offset
    pack = RECORD.pack
    for frame in frames:
        length = frame_size(frame)
        gathered.add(pack(length, record_crc(length, sequence, frame), sequence))
        addresses.append(LogAddress(sequence, ledger, offset))
        for piece in frame if isinstance(frame, list) else (frame,):
            gathered.add(piece)
        sequence += 1
        offset += RECORD.size + length
    return gathered.done(), addresses, offset - start


def ledger_file_name(ledger_id: int) -> str:
    return f"ledger-{ledger_id}.log"


# -- epoch file ------------------------------------------------------------------------------


def encode_epoch(epoch: int) -> bytes:
    return _EPOCH.pack(EPOCH_MAGIC, EPOCH_VERSION, 0, epoch)


def decode_epoch(data: bytes, path: str) -> int:
    """The epoch stored in ``data`` (the epoch file's bytes); -1 for an empty (new) file."""
    if not data:
        return -1
    if len(data) != EPOCH_SIZE:
        raise DataLogCorruptionError(f"{path}: epoch file has {len(data)} bytes, not {EPOCH_SIZE}")
    magic, version, _reserved, epoch = _EPOCH.unpack(data)
    if magic != EPOCH_MAGIC or version != EPOCH_VERSION:
        raise DataLogCorruptionError(f"{path}: not an epoch file v{EPOCH_VERSION} at offset 0")
    return int(epoch)


# -- ledger header ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class LedgerHeader:
    epoch: int
    ledger_id: int
    first_sequence: int


def encode_ledger_header(header: LedgerHeader) -> bytes:
    return _LEDGER_HEADER.pack(
        LEDGER_MAGIC,
        LEDGER_VERSION,
        LEDGER_HEADER_SIZE,
        header.epoch,
        header.ledger_id,
        header.first_sequence,
    )


def decode_ledger_header(data: bytes, path: str) -> LedgerHeader:
    if len(data) < LEDGER_HEADER_SIZE:
        raise DataLogCorruptionError(f"{path}: ledger header cut short at offset {len(data)}")
    magic, version, size, epoch, ledger_id, first = _LEDGER_HEADER.unpack_from(data)
    if magic != LEDGER_MAGIC or version != LEDGER_VERSION or size != LEDGER_HEADER_SIZE:
        raise DataLogCorruptionError(
            f"{path}: bad ledger header at offset 0 (magic {magic!r}, version {version})"
        )
    return LedgerHeader(epoch, ledger_id, first)


# -- manifest --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One ledger file as the manifest lists it."""

    id: int
    epoch: int
    first_sequence: int
    #: Valid bytes of a ledger no one writes any more (None: its epoch may still write it).
    sealed_length: int | None = None
    #: Sequence after the last record of a sealed ledger.
    end_sequence: int | None = None

    def sealed(self, length: int, end_sequence: int) -> LedgerEntry:
        return dataclasses.replace(self, sealed_length=length, end_sequence=end_sequence)

    def wholly_at_or_below(self, sequence: int) -> bool:
        """True if every record of this sealed ledger has a sequence ``<= sequence``."""
        return self.end_sequence is not None and self.end_sequence - 1 <= sequence


@dataclasses.dataclass(frozen=True, slots=True)
class Manifest:
    """The file log's durable table of contents."""

    epoch: int = -1
    ledgers: tuple[LedgerEntry, ...] = ()
    truncation: LogAddress | None = None


def encode_manifest(manifest: Manifest) -> bytes:
    truncation = manifest.truncation
    record = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "epoch": manifest.epoch,
        "truncation": None
        if truncation is None
        else [truncation.sequence, truncation.ledger, truncation.offset],
        "ledgers": [dataclasses.asdict(entry) for entry in manifest.ledgers],
    }
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode() + b"\n"


def decode_manifest(data: bytes, path: str) -> Manifest:
    try:
        record = json.loads(data)
        if record["format"] != MANIFEST_FORMAT or record["version"] != MANIFEST_VERSION:
            raise ValueError(f"format {record['format']!r} version {record['version']!r}")
        return Manifest(
            epoch=int(record["epoch"]),
            ledgers=tuple(_ledger_entry(item) for item in record["ledgers"]),
            truncation=None if record["truncation"] is None else LogAddress(*record["truncation"]),
        )
    except (ValueError, KeyError, TypeError) as error:
        raise DataLogCorruptionError(f"{path}: unreadable manifest at offset 0: {error}") from None


def _ledger_entry(item: dict[str, Any]) -> LedgerEntry:
    return LedgerEntry(
        id=int(item["id"]),
        epoch=int(item["epoch"]),
        first_sequence=int(item["first_sequence"]),
        sealed_length=None if item["sealed_length"] is None else int(item["sealed_length"]),
        end_sequence=None if item["end_sequence"] is None else int(item["end_sequence"]),
    )
