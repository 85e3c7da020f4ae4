"""Byte formats of operations, data frames and metadata snapshots: round trips and golden bytes."""

from __future__ import annotations

import contextlib
from pathlib import Path

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from segment_app.engine.containers.metadata import ContainerMetadata
from segment_app.engine.logs.frames import (
    FRAME_HEADER_SIZE,
    FRAME_PART_BYTES,
    FrameBuilder,
    FrameCorruptionError,
    parse_frame,
)
from segment_app.engine.logs.operations import (
    Append,
    OperationFormatError,
    decode_operation,
    encode_operation,
)
from tests.engine.golden import OPERATIONS, golden_metadata

FIXTURES = Path(__file__).parent.parent / "fixtures" / "engine"


def fixture(name: str) -> bytes:
    return bytes.fromhex((FIXTURES / f"{name}.hex").read_text().strip())


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_golden_operation_decodes_and_reencodes(name: str) -> None:
    raw = fixture(name)
    op = decode_operation(raw)
    assert op == OPERATIONS[name]
    assert b"".join(encode_operation(op)) == raw


def test_golden_frame_decodes() -> None:
    ops = list(parse_frame(fixture("frame_v1")))
    assert ops == list(OPERATIONS.values())


def test_golden_metadata_snapshot_decodes() -> None:
    restored = ContainerMetadata.from_snapshot(fixture("metadata_snapshot_v1"))
    expected = golden_metadata()
    assert restored.snapshot() == expected.snapshot()
    assert restored.segments[10].pending_merges == expected.segments[10].pending_merges
    assert restored.by_name == {"a/b/0.#epoch.0": 10, "a/b/1": 11}


def test_frame_detects_a_flipped_bit_anywhere_in_the_body() -> None:
    frame = bytearray(fixture("frame_v1"))
    for position in range(FRAME_HEADER_SIZE, len(frame), 7):
        damaged = bytearray(frame)
        damaged[position] ^= 0x10
        with pytest.raises(FrameCorruptionError):
            list(parse_frame(bytes(damaged)))


def test_frame_without_crc_check_serves_the_flipped_bit() -> None:
    """The test-only switch really switches the check off (so the CRC test can fail)."""
    frame = bytearray(fixture("frame_v1"))
    position = frame.index(b"hello")
    frame[position] ^= 0x01
    ops = list(parse_frame(bytes(frame), verify_crc=False))
    assert any(isinstance(op, Append) and op.data.endswith(b"iello") for op in ops)


@pytest.mark.parametrize("cut", [0, 5, FRAME_HEADER_SIZE, FRAME_HEADER_SIZE + 3, -1])
def test_truncated_frames_are_rejected(cut: int) -> None:
    frame = fixture("frame_v1")
    with pytest.raises(FrameCorruptionError):
        list(parse_frame(frame[:cut]))


def test_unknown_operation_version_is_rejected() -> None:
    raw = bytearray(fixture("seal_v1"))
    raw[1] = 99
    with pytest.raises(OperationFormatError, match="version 99"):
        decode_operation(bytes(raw))


def test_append_records_are_the_bytes_of_append_operations() -> None:
    """``add_append`` (the durable log's path for the wire server's appends) writes exactly
    what ``add(Append(...))`` writes: the golden frame, rebuilt with it for every Append."""
    builder = FrameBuilder(1 << 20)
    for op in OPERATIONS.values():
        if isinstance(op, Append):
            args = (op.sequence, op.segment_id, op.offset, op.writer_id, op.event_number)
            builder.add_append(*args, memoryview(op.data))
        else:
            builder.add(op)
    assert b"".join(builder.close()) == fixture("frame_v1")


def test_frame_builder_respects_its_limit() -> None:
    builder = FrameBuilder(4096)
    op = Append(1, b"x" * 1000, 0, sequence=1)
    added = 0
    while builder.fits(builder.encoded_size(encode_operation(op))):
        builder.add(op)
        added += 1
    frame = b"".join(builder.close())
    assert added == 3 and len(frame) <= 4096
    assert crc32c.crc32c(bytes(frame[FRAME_HEADER_SIZE:])) == int.from_bytes(frame[24:28], "big")


def test_a_closed_frame_hands_on_big_appends_as_they_are_and_joins_the_rest() -> None:
    builder = FrameBuilder(8 << 20)
    big = memoryview(bytes(range(256)) * 1024)  # 256 KiB: at least FRAME_PART_BYTES
    small = [Append(1, b"s" * 100, 0, sequence=n) for n in (1, 3)]
    builder.add(small[0])
    builder.add_append(2, 1, 100, None, -1, big)
    builder.add(small[1])
    parts = builder.close()
    assert len(big) >= FRAME_PART_BYTES and any(part is big for part in parts)
    assert len(parts) == 4  # header, the first append's record, the big data, the rest
    ops = list(parse_frame(b"".join(parts)))  # (checks the CRC taken over the parts)
    assert [bytes(op.data) for op in ops] == [b"s" * 100, bytes(big), b"s" * 100]


@given(st.binary(max_size=300))
def test_decoder_raises_only_format_errors_on_garbage(data: bytes) -> None:
    with contextlib.suppress(OperationFormatError):
        decode_operation(data)
    with contextlib.suppress(OperationFormatError):
        list(parse_frame(data, verify_crc=False))
