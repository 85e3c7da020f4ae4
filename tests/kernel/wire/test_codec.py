"""Wire codec: every command round-trips; malformed input fails with ProtocolError only."""

from __future__ import annotations

import contextlib
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from millrace.kernel import wire as p

#: Every type code of the protocol's command table (Java v17 plus the two Rust-only table codes).
TABLE_CODES = {
    -127, -1, -2, -3, -4, -5, -6, 0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 20, 21,
    *range(28, 43), 50, 51, 52, 53, *range(55, 62), *range(68, 92), 100,
    p.TRACE_CONTEXT_TYPE,  # (Millrace's own: a trace context before a request)
}  # fmt: skip

SAMPLE_BY_KIND = {
    "L": -(2**63) + 12345,
    "I": -7,
    "B": 2,
    "Z": True,
    "S": "scope/strëam/0.#epoch.3",
    "U": uuid.UUID("0123456789abcdef0123456789abcdef"),
    "Buf": b"\x00buffer\xff",
    "Data": b"\x00\x00\x00\x00\x00\x00\x00\x03abc",
    "Rest": b"rest of it",
    "PadLen": 5,
    "Event": b"event body",
    "Chunks": (p.ChunkInfo(1, 2, 3, "chunk-1", True), p.ChunkInfo(4, 5, 6, "chunk-2", False)),
    "AttrUpdates": (p.ConditionalAttributeUpdate(uuid.UUID(int=9), 4, 10, -(2**63)),),
    "Strs": ("a", "b/c"),
    "Merged": (("src-1", 10), ("src-2", 30)),
    "Entries": (
        (p.TableKey(b"k1", 5), p.TableValue(b"v1")),
        (p.TableKey(b"k2", p.KEY_NO_VERSION), p.TableValue(b"")),
    ),
    "Keys": (p.TableKey(b"key", -1), p.TableKey(b"x", 0)),
    "IterArgs": p.TableIteratorArgs(b"token", b"", b"from", b"to"),
    "Versions": (0, 1, 2**40),
}


def sample(type_code: int) -> object:
    cls = p.command_types()[type_code]
    return cls(*(SAMPLE_BY_KIND[kind] for _, kind, _ in p.field_spec(type_code)))


def frame_of(cmd: object) -> tuple[int, bytes]:
    frame = p.encode_frame(cmd)
    type_code, length = p.FRAME_HEADER.unpack_from(frame)
    assert length == len(frame) - 8
    return type_code, frame[8:]


ALL_CODES = sorted(p.command_types())


def test_command_table_is_complete() -> None:
    assert set(p.command_types()) == TABLE_CODES


def test_commands_are_slotted_dataclasses() -> None:
    for cls in p.command_types().values():
        assert hasattr(cls, "__slots__"), cls
        assert cls.TYPE in TABLE_CODES


@pytest.mark.parametrize("type_code", ALL_CODES)
def test_round_trip(type_code: int) -> None:
    cmd = sample(type_code)
    code, payload = frame_of(cmd)
    assert code == type_code
    decoded = p.decode_frame(code, payload)
    assert decoded == cmd
    assert p.encode_frame(decoded) == p.encode_frame(cmd)


@pytest.mark.parametrize("type_code", ALL_CODES)
def test_every_truncation_fails_cleanly_or_drops_optional_fields(type_code: int) -> None:
    cmd = sample(type_code)
    _, payload = frame_of(cmd)
    for cut in range(len(payload)):
        try:
            decoded = p.decode_frame(type_code, payload[:cut])
        except p.ProtocolError:
            continue
        # Only a cut exactly before optional trailing fields (or inside a Rest/padding field,
        # or inside trailing iterator args) may decode.
        assert type(decoded) is type(cmd)


@pytest.mark.parametrize(
    "type_code", [c for c in ALL_CODES if any(opt for _, _, opt in p.field_spec(c))]
)
def test_optional_trailing_fields_default_when_absent(type_code: int) -> None:
    cmd = sample(type_code)
    spec = p.field_spec(type_code)
    cls = type(cmd)
    required = [name for name, _, opt in spec if not opt]
    minimal = cls(*(getattr(cmd, name) for name in required))
    full_payload = frame_of(minimal)[1]
    optional_len = len(frame_of(minimal)[1]) - _required_length(minimal, spec)
    short_payload = full_payload[: len(full_payload) - optional_len]
    assert p.decode_frame(type_code, short_payload) == minimal


def _required_length(cmd: object, spec: tuple[tuple[str, str, bool], ...]) -> int:
    """Bytes of the required fields: encode a probe carrying only them via the generic writer."""
    w = p.Writer()
    for name, kind, opt in spec:
        if not opt:
            from millrace.kernel.wire.codec import _KINDS

            _KINDS[kind][1](w, getattr(cmd, name))
    return sum(len(part) for part in w.finish(0)) - 8


def test_trailing_garbage_is_rejected_unless_lenient() -> None:
    _, payload = frame_of(p.SegmentCreated(3, "s"))
    with pytest.raises(p.ProtocolError, match="trailing"):
        p.decode_frame(21, payload + b"\x00" * 8)
    assert p.decode_frame(21, payload + b"\x00" * 8, lenient=True) == p.SegmentCreated(3, "s")


def test_partial_optional_field_is_truncation() -> None:
    _, payload = frame_of(p.NoSuchSegment(1, "s", "", 5))
    with pytest.raises(p.ProtocolError, match="truncated"):
        p.decode_frame(53, payload[:-3])


def test_unknown_type_code() -> None:
    with pytest.raises(p.UnknownCommandError) as info:
        p.decode_frame(6, b"")
    assert info.value.type_code == 6


def test_oversize_payload_rejected_on_decode_and_encode() -> None:
    with pytest.raises(p.ProtocolError, match="exceeds"):
        p.decode_frame(-2, bytes(p.FRAME_PAYLOAD_BYTES_MAX + 1))
    with pytest.raises(p.ProtocolError, match="exceeds"):
        p.encode_frame(p.PartialEvent(bytes(p.FRAME_PAYLOAD_BYTES_MAX + 1)))
    writer = uuid.uuid4()
    with pytest.raises(p.ProtocolError, match="exceeds"):
        p.encode_frame(p.AppendBlockEnd(writer, 0, bytes(p.FRAME_PAYLOAD_BYTES_MAX), 1, 1, 1))


def test_largest_payload_is_accepted() -> None:
    data = bytes(p.FRAME_PAYLOAD_BYTES_MAX)
    code, payload = frame_of(p.PartialEvent(data))
    assert len(payload) == p.FRAME_PAYLOAD_BYTES_MAX
    assert len(p.decode_frame(code, payload).data) == p.FRAME_PAYLOAD_BYTES_MAX


def test_bad_utf8_is_a_protocol_error() -> None:
    payload = struct.pack(">qH", 1, 2) + b"\xff\xfe"
    with pytest.raises(p.ProtocolError, match="UTF-8"):
        p.decode_frame(21, payload)


def test_java_modified_utf8_is_understood() -> None:
    # Java writeUTF: NUL as C0 80, U+1F600 as a CESU-8 surrogate pair.
    raw = b"a\xc0\x80" + "\ud83d\ude00".encode("utf-8", "surrogatepass")
    payload = struct.pack(">qH", 1, len(raw)) + raw
    assert p.decode_frame(21, payload).segment == "a\x00\U0001f600"


def test_bad_boolean_and_negative_buffer() -> None:
    _, payload = frame_of(p.SegmentAttributeUpdated(1, True))
    with pytest.raises(p.ProtocolError, match="boolean"):
        p.decode_frame(37, payload[:-1] + b"\x02")
    _, payload = frame_of(p.SegmentRead("s", 0, False, True, b"xy", 1))
    bad = payload.replace(struct.pack(">i", 2) + b"xy", struct.pack(">i", -2) + b"xy")
    with pytest.raises(p.ProtocolError, match="negative"):
        p.decode_frame(10, bad)


def test_embedded_event_must_have_type_zero() -> None:
    _, payload = frame_of(p.ConditionalAppend(uuid.uuid4(), 1, 0, b"abc", 5))
    bad = payload[:32] + struct.pack(">i", 3) + payload[36:]
    with pytest.raises(p.ProtocolError, match="type 3"):
        p.decode_frame(5, bad)


def test_conditional_append_wraps_the_event_header() -> None:
    frame = p.encode_frame(p.ConditionalAppend(uuid.UUID(int=1), 2, 3, b"abc", 4))
    assert frame[8 + 32 :] == bytes.fromhex("00000000 00000003 616263 0000000000000004")


def test_huge_list_count_is_rejected_quickly() -> None:
    payload = struct.pack(">qi", 1, 2**31 - 1)
    with pytest.raises(p.ProtocolError, match="count"):
        p.decode_frame(75, payload)


def test_table_key_layouts() -> None:
    w = p.Writer()
    from millrace.kernel.wire.table_commands import write_table_key

    write_table_key(w, p.TableKey(b"ab", 7))
    assert bytes(w.cur) == bytes.fromhex("0000000e 00000002 6162 0000000000000007")
    w = p.Writer()
    write_table_key(w, p.TableKey(b"", p.KEY_NO_VERSION))
    assert bytes(w.cur) == bytes.fromhex("00000004 00000000")  # Java: no version for empty keys
    # Rust always writes the version, even for an empty key: still understood.
    rust_empty = struct.pack(">qH", 1, 1) + b"t" + struct.pack(">Hi", 0, 1)
    rust_empty += bytes.fromhex("0000000c 00000000 0000000000000009")
    assert p.decode_frame(78, rust_empty) == p.ReadTable(1, "t", "", (p.TableKey(b"", 9),))


def test_iterator_args_missing_fields_read_as_empty() -> None:
    payload = struct.pack(">qH", 4, 1) + b"t" + struct.pack(">Hi", 0, 10)
    payload += struct.pack(">i", 3) + b"tok"
    decoded = p.decode_frame(83, payload)
    assert decoded.args == p.TableIteratorArgs(b"tok")


def test_request_id_of_malformed_requests() -> None:
    assert p.request_id_of(28, struct.pack(">q", 42) + b"\x00") == 42
    assert p.request_id_of(4, bytes(40)) is None  # AppendBlockEnd does not lead with it
    assert p.request_id_of(28, b"\x00") is None
    assert p.request_id_of(12345, bytes(8)) is None


def test_decoded_append_data_is_a_zero_copy_view() -> None:
    _, payload = frame_of(p.AppendBlockEnd(uuid.uuid4(), 3, b"abc", 1, 1, 1))
    decoded = p.decode_frame(4, payload)
    assert isinstance(decoded.data, memoryview)
    assert decoded.data.obj is payload


def test_fast_paths_match_generic_layout() -> None:
    writer = uuid.uuid4()
    cmds = [
        p.AppendBlockEnd(writer, 3, b"abc", 1, 9, 77),
        p.DataAppended(writer, 9, 8, 77, 1000),
        p.SegmentRead("s/t/0", 5, False, True, b"x" * 5000, 3),
    ]
    from millrace.kernel.wire.codec import _REGISTRY, _generic_codec, _parse_spec

    for cmd in cmds:
        generic = _generic_codec(type(cmd), cmd.TYPE, _parse_spec(type(cmd), _spec_strings(cmd)))
        assert b"".join(generic.encode(cmd)) == p.encode_frame(cmd)
        payload = p.encode_frame(cmd)[8:]
        assert generic.decode(p.Reader(memoryview(payload))) == p.decode_frame(cmd.TYPE, payload)
    assert _REGISTRY  # registry untouched by the probes


def _spec_strings(cmd: object) -> list[str]:
    return [f"{n} {k}{'?' if o else ''}" for n, k, o in p.field_spec(cmd.TYPE)]  # type: ignore[attr-defined]


def test_command_free_append_forms_match_the_codecs() -> None:
    from millrace.kernel.wire.fastpath import (
        APPEND_BLOCK_END_DATA_START,
        data_appended_frame,
        split_append_block_end,
    )

    writer = uuid.uuid4()
    payload = p.encode_frame(p.AppendBlockEnd(writer, 3, b"abc", 2, 9, 77))[8:]
    raw, whole, end, events, last, request_id = split_append_block_end(payload)  # type: ignore[misc]
    assert (raw, whole, events, last, request_id) == (writer.bytes, 3, 2, 9, 77)
    assert payload[APPEND_BLOCK_END_DATA_START:end] == b"abc"
    assert split_append_block_end(payload[:-8])[5] == -1  # type: ignore[index]
    for bad in (payload[:-1], payload[:-9], payload + b"x", payload[:30], b""):
        assert split_append_block_end(bad) is None
    negative = payload[:20] + struct.pack(">i", -1) + payload[24:]
    assert split_append_block_end(negative) is None
    frame = data_appended_frame(writer.bytes, 9, 8, 77, 1000)
    assert frame == p.encode_frame(p.DataAppended(writer, 9, 8, 77, 1000))


def test_data_appended_without_optional_fields() -> None:
    writer = uuid.UUID(int=5)
    payload = frame_of(p.DataAppended(writer, 3))[1][:24]
    assert p.decode_frame(7, payload) == p.DataAppended(writer, 3, -1, -1, -1)


# --------------------------------------------------------------------------------------------
# framing


def test_assembler_splits_byte_by_byte() -> None:
    frames = [p.encode_frame(sample(code)) for code in (1, 4, 9, 100, -127)]
    stream = b"".join(frames)
    asm = p.FrameAssembler(buffer_bytes=1024, large_payload_bytes_min=128)
    got = []
    for i in range(len(stream)):
        got.extend(asm.feed(stream[i : i + 1]))
    assert [(code, bytes(payload)) for code, payload in got] == [
        (p.FRAME_HEADER.unpack_from(f)[0], f[8:]) for f in frames
    ]


def test_assembler_large_frames_get_their_own_buffer() -> None:
    big = p.encode_frame(p.AppendBlockEnd(uuid.uuid4(), 0, bytes(range(256)) * 400, 1, 1, 1))
    small = p.encode_frame(p.KeepAlive())
    asm = p.FrameAssembler(buffer_bytes=4096, large_payload_bytes_min=1024)
    got = asm.feed(small + big[:100]) + asm.feed(big[100:5000]) + asm.feed(big[5000:] + small)
    assert [code for code, _ in got] == [100, 4, 100]
    assert isinstance(got[1][1], memoryview)
    assert bytes(got[1][1]) == big[8:]


@pytest.mark.parametrize("length", [-1, p.FRAME_PAYLOAD_BYTES_MAX + 1, 2**31 - 1])
def test_assembler_rejects_bad_lengths(length: int) -> None:
    asm = p.FrameAssembler()
    with pytest.raises(p.FramingError):
        asm.feed(struct.pack(">ii", 1, length))


def test_assembler_accepts_the_largest_frame() -> None:
    asm = p.FrameAssembler()
    header = struct.pack(">ii", -2, p.FRAME_PAYLOAD_BYTES_MAX)
    got = asm.feed(header + bytes(p.FRAME_PAYLOAD_BYTES_MAX))
    assert len(got) == 1 and len(got[0][1]) == p.FRAME_PAYLOAD_BYTES_MAX


# --------------------------------------------------------------------------------------------
# fuzz: the decoder raises ProtocolError or decodes, nothing else

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(type_code=st.one_of(st.sampled_from(ALL_CODES), st.integers(-(2**31), 2**31 - 1)),
       payload=st.binary(max_size=300))  # fmt: skip
def test_fuzz_random_payloads(type_code: int, payload: bytes) -> None:
    try:
        cmd = p.decode_frame(type_code, payload)
    except p.ProtocolError:
        return
    assert p.decode_frame(type_code, p.encode_frame(cmd)[8:]) == cmd


@FUZZ
@given(type_code=st.sampled_from(ALL_CODES), data=st.data())
def test_fuzz_mutated_valid_frames(type_code: int, data: st.DataObject) -> None:
    payload = bytearray(frame_of(sample(type_code))[1])
    for _ in range(data.draw(st.integers(1, 4))):
        if payload and data.draw(st.booleans()):
            i = data.draw(st.integers(0, len(payload) - 1))
            payload[i] = data.draw(st.integers(0, 255))
        else:
            i = data.draw(st.integers(0, len(payload)))
            payload[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    with contextlib.suppress(p.ProtocolError):
        p.decode_frame(type_code, bytes(payload))


@FUZZ
@given(chunks=st.lists(st.binary(max_size=64), max_size=20))
def test_fuzz_assembler(chunks: list[bytes]) -> None:
    asm = p.FrameAssembler(buffer_bytes=1024, large_payload_bytes_min=128)
    try:
        for chunk in chunks:
            for code, payload in asm.feed(chunk):
                with contextlib.suppress(p.ProtocolError):
                    p.decode_frame(code, payload)
    except p.FramingError:
        pass
