"""Golden wire frames (tests/fixtures/wire) decode and re-encode byte for byte."""

from __future__ import annotations

import pathlib
import uuid

import pytest

from millrace.kernel import wire as p

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "wire"
WRITER = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
SEGMENT = "sc1/st1/0.#epoch.0"
EVENT = bytes.fromhex("00000000 00000007") + b"hello-1"
MIN_LONG = -(2**63)

EXPECTED = {
    "hello_17_5": p.Hello(17, 5),
    "hello_15_5": p.Hello(15, 5),
    "setup_append": p.SetupAppend(1, WRITER, SEGMENT, ""),
    "append_setup": p.AppendSetup(1, SEGMENT, WRITER, MIN_LONG),
    "append_block_end": p.AppendBlockEnd(WRITER, 15, EVENT, 1, 1, 2),
    "data_appended": p.DataAppended(WRITER, 1, MIN_LONG, 2, 15),
    "read_segment": p.ReadSegment(SEGMENT, 0, 8388608, "", 3),
    "segment_read": p.SegmentRead(SEGMENT, 0, True, False, EVENT, 3),
    "conditional_block_end": p.ConditionalBlockEnd(WRITER, 1, 0, b"abc", 4),
    "conditional_check_failed": p.ConditionalCheckFailed(WRITER, 1, 4),
    "no_such_segment": p.NoSuchSegment(3, SEGMENT, "", -1),
    "segment_is_sealed": p.SegmentIsSealed(5, SEGMENT, "", 15),
    "segment_is_truncated": p.SegmentIsTruncated(6, SEGMENT, 16, "", 4),
    "error_message": p.ErrorMessage(7, "", "bad", 0),
    "auth_token_check_failed": p.AuthTokenCheckFailed(8, "expired", 1),
    "operation_unsupported": p.OperationUnsupported(9, "ReadTable", ""),
    "wrong_host": p.WrongHost(10, SEGMENT, "", ""),
    "keep_alive": p.KeepAlive(),
}

#: Fixtures without optional trailing fields: they decode with the defaults.
LEGACY = {
    "append_block_end_no_request_id": p.AppendBlockEnd(WRITER, 15, EVENT, 1, 1, p.NO_REQUEST_ID),
}


def load(name: str) -> bytes:
    lines = (FIXTURES / f"{name}.hex").read_text().splitlines()
    return bytes.fromhex("".join(line.split("#", 1)[0] for line in lines))


def split(frame: bytes) -> tuple[int, bytes]:
    type_code, length = p.FRAME_HEADER.unpack_from(frame)
    assert length == len(frame) - p.FRAME_HEADER_BYTES, "fixture length field is wrong"
    return type_code, frame[p.FRAME_HEADER_BYTES :]


def test_every_fixture_is_checked() -> None:
    on_disk = {f.stem for f in FIXTURES.glob("*.hex")}
    assert on_disk == set(EXPECTED) | set(LEGACY)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_decodes_to_expected_command(name: str) -> None:
    type_code, payload = split(load(name))
    assert p.decode_frame(type_code, payload) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_reencodes_byte_for_byte(name: str) -> None:
    frame = load(name)
    type_code, payload = split(frame)
    assert p.encode_frame(p.decode_frame(type_code, payload)) == frame
    assert p.encode_frame(EXPECTED[name]) == frame


def test_legacy_append_block_end_without_request_id() -> None:
    type_code, payload = split(load("append_block_end_no_request_id"))
    decoded = p.decode_frame(type_code, payload)
    assert decoded == LEGACY["append_block_end_no_request_id"]
    # Re-encoding writes the full v17 layout: the optional requestId appears as -1.
    assert p.encode_frame(decoded) == load("append_block_end")[:-8] + b"\xff" * 8


def test_event_header_matches_the_rust_client_trace() -> None:
    """An event "hello-1" is wrapped as 00000000 00000007 68656c6c6f2d31 (Rust client trace)."""
    assert p.encode_frame(p.Event(b"hello-1")) == EVENT
