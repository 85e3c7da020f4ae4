"""The golden operations: one of each type and version, as first written (v1).

``python -m tests.engine.golden`` regenerated ``tests/fixtures/engine/*.hex`` once; never run it
again for an existing version: old bytes must keep decoding as they did.
"""

from __future__ import annotations

import uuid

from segment_app.engine.containers.metadata import ContainerMetadata, PendingMerge
from segment_app.engine.logs.operations import (
    Append,
    ChunkRecord,
    Delete,
    MapSegment,
    Merge,
    MetadataCheckpoint,
    Seal,
    Truncate,
    UpdateAttributes,
    UpdateStorage,
)

WRITER = uuid.UUID("0123456789abcdef0123456789abcdef")
ATTR = uuid.UUID("fedcba98765432100123456789abcdef")

OPERATIONS = {
    "map_segment_v1": MapSegment(7, "scope/stream/0.#epoch.0", sequence=1),
    "append_v1": Append(7, b"\x00\x00\x00\x00\x00\x00\x00\x05hello", 42, WRITER, 9, sequence=2),
    "append_anonymous_v1": Append(7, b"raw", 0, None, 0, sequence=3),
    "seal_v1": Seal(7, sequence=4),
    "truncate_v1": Truncate(7, 1024, sequence=5),
    "merge_v1": Merge(7, 8, 4096, 512, sequence=6),
    "update_attributes_v1": UpdateAttributes(7, {ATTR: -5, WRITER: 2**62}, sequence=7),
    "delete_v1": Delete(8, sequence=8),
    "update_storage_v1": UpdateStorage(
        7,
        4096,
        1,
        3,
        [ChunkRecord("scope/stream/0.#epoch.0.E2.O0", 0, 4096, 2)],
        8,
        True,
        False,
        sequence=9,
    ),
    "checkpoint_v1": MetadataCheckpoint(snapshot=b"\x01snapshot", sequence=10),
}


def golden_metadata() -> ContainerMetadata:
    metadata = ContainerMetadata(3)
    for op in (MapSegment(10, "a/b/0.#epoch.0", sequence=1), MapSegment(11, "a/b/1", sequence=2)):
        metadata.apply(op)
    segment = metadata.segments[10]
    segment.length, segment.storage_length, segment.start_offset = 300, 200, 50
    segment.sealed, segment.attributes = True, {WRITER: 17}
    segment.chunks = [ChunkRecord("a/b/0.#epoch.0.E5.O0", 0, 200, 5)]
    segment.pending_merges = [PendingMerge(200, 11, 100)]
    metadata.epoch, metadata.sequence, metadata.next_segment_id = 5, 99, 12
    return metadata


if __name__ == "__main__":  # pragma: no cover - run once per new format version
    from pathlib import Path

    from segment_app.engine.logs.frames import FrameBuilder
    from segment_app.engine.logs.operations import encode_operation

    out = Path(__file__).parent.parent / "fixtures" / "engine"
    for name, op in OPERATIONS.items():
        (out / f"{name}.hex").write_text(b"".join(encode_operation(op)).hex() + "\n")
    builder = FrameBuilder(1 << 20)
    for op in OPERATIONS.values():
        builder.add(op)
    (out / "frame_v1.hex").write_text(bytes(builder.close()).hex() + "\n")
    (out / "metadata_snapshot_v1.hex").write_text(golden_metadata().snapshot().hex() + "\n")
