"""Hand-tuned codecs of the append and read paths: AppendBlockEnd, DataAppended, SegmentRead.

Responsibility: the same bytes as the generic codecs, with precompiled ``struct.Struct`` layouts
and zero-copy ``memoryview`` slices of the data buffers (the data of a decoded AppendBlockEnd or
SegmentRead is a view of the received payload; encoding references the data instead of copying
it). ``tests/kernel/wire/test_codec.py`` checks both paths produce identical bytes.

For the wire server's hottest loop there are also command-free forms: ``split_append_block_end``
reads an AppendBlockEnd payload into plain values (the writer id as its 16 bytes) and
``data_appended_frame`` encodes a DataAppended frame from such values.
"""

from __future__ import annotations

import functools
import struct
import uuid

from .codec import (
    FRAME_PAYLOAD_BYTES_MAX,
    NO_REQUEST_ID,
    ProtocolError,
    Reader,
    Writer,
    override_codec,
    uuid_from_bytes,
)
from .commands import AppendBlockEnd, DataAppended, SegmentRead

__all__ = ["APPEND_BLOCK_END_DATA_START", "data_appended_frame", "split_append_block_end"]

_U64_MASK = (1 << 64) - 1

_ABE_HEAD_RAW = struct.Struct(">16sii")  # writer id bytes, sizeOfWholeEvents, data length
#: Where an AppendBlockEnd payload's data starts.
APPEND_BLOCK_END_DATA_START = _ABE_HEAD_RAW.size
_ABE_TAIL_ID = struct.Struct(">iqq")  # numEvents, lastEventNumber, requestId
_DA_FRAME_RAW = struct.Struct(">ii16sqqqq")
_ABE_TAIL = struct.Struct(">iq")  # numEvents, lastEventNumber
_ABE_FRAME_HEAD = struct.Struct(">iiQQii")
_ABE_FRAME_TAIL = struct.Struct(">iqq")
_LONG = struct.Struct(">q")
_DA_FIELDS = struct.Struct(">QQqqqq")
_DA_NUMBERS = struct.Struct(">16xqqqq")
_DA_FRAME = struct.Struct(">iiQQqqqq")
_SR_FLAGS = struct.Struct(">q??i")  # offset, atTail, endOfSegment, data length


def _uuid_at(mv: memoryview, start: int) -> uuid.UUID:
    return uuid_from_bytes(mv[start : start + 16])


def split_append_block_end(payload: bytes) -> tuple[bytes, int, int, int, int, int] | None:
    """(writer id bytes, sizeOfWholeEvents, data end, numEvents, lastEventNumber, requestId)
    of an AppendBlockEnd payload, whose data is ``payload[APPEND_BLOCK_END_DATA_START:end]``;
    None if it is not well formed (``decode_frame`` then says how)."""
    if len(payload) < APPEND_BLOCK_END_DATA_START + _ABE_TAIL.size:
        return None
    raw, whole, n = _ABE_HEAD_RAW.unpack_from(payload)
    if n < 0:
        return None
    end = APPEND_BLOCK_END_DATA_START + n
    rest = len(payload) - end
    if rest == _ABE_TAIL_ID.size:
        num_events, last, request_id = _ABE_TAIL_ID.unpack_from(payload, end)
        return raw, whole, end, num_events, last, request_id
    if rest == _ABE_TAIL.size:
        num_events, last = _ABE_TAIL.unpack_from(payload, end)
        return raw, whole, end, num_events, last, NO_REQUEST_ID
    return None


def _decode_append_block_end(r: Reader) -> AppendBlockEnd:
    """The command, read by ``split_append_block_end`` (the one reader of the layout)."""
    start = r.pos
    fields = split_append_block_end(r.mv[start : r.end])  # type: ignore[arg-type]
    if fields is None:
        raise ProtocolError("malformed AppendBlockEnd: its data length and the payload disagree")
    raw, whole, end, num_events, last, request_id = fields
    r.pos = r.end
    data = r.mv[start + APPEND_BLOCK_END_DATA_START : start + end]
    return AppendBlockEnd(uuid_from_bytes(raw), whole, data, num_events, last, request_id)


#: ``data_appended_frame(writer id bytes, eventNumber, previousEventNumber, requestId,
#: currentSegmentWriteOffset)``: the frame ``encode_frame(DataAppended(...))`` makes.
data_appended_frame = functools.partial(_DA_FRAME_RAW.pack, DataAppended.TYPE, _DA_FIELDS.size)


def _encode_append_block_end(cmd: AppendBlockEnd) -> list[bytes | bytearray | memoryview]:
    n = len(cmd.data)
    size = 16 + 4 + 4 + n + 4 + 8 + 8
    if size > FRAME_PAYLOAD_BYTES_MAX:
        raise ProtocolError(f"AppendBlockEnd of {size} bytes exceeds {FRAME_PAYLOAD_BYTES_MAX}")
    w = cmd.writer_id.int
    head = _ABE_FRAME_HEAD.pack(4, size, w >> 64, w & _U64_MASK, cmd.size_of_whole_events, n)
    tail = _ABE_FRAME_TAIL.pack(cmd.num_events, cmd.last_event_number, cmd.request_id)
    return [head, cmd.data, tail]


def _decode_data_appended(r: Reader) -> DataAppended:
    if r.end - r.pos == _DA_FIELDS.size:
        event, previous, request_id, offset = _DA_NUMBERS.unpack_from(r.mv, r.pos)
        writer_id = _uuid_at(r.mv, r.pos)
        r.pos = r.end
        return DataAppended(writer_id, event, previous, request_id, offset)
    writer_id, event = r.uid(), r.i64()
    rest = [r.i64() for _ in range(3) if r.pos < r.end]
    return DataAppended(writer_id, event, *rest)


def _encode_data_appended(cmd: DataAppended) -> list[bytes | bytearray | memoryview]:
    w = cmd.writer_id.int
    return [
        _DA_FRAME.pack(
            7,
            _DA_FIELDS.size,
            w >> 64,
            w & _U64_MASK,
            cmd.event_number,
            cmd.previous_event_number,
            cmd.request_id,
            cmd.current_segment_write_offset,
        )
    ]


def _decode_segment_read(r: Reader) -> SegmentRead:
    segment = r.string()
    offset, at_tail, end_of_segment, n = _SR_FLAGS.unpack_from(r.mv, r.take(_SR_FLAGS.size))
    if r.mv[r.pos - 6] > 1 or r.mv[r.pos - 5] > 1:
        raise ProtocolError("bad boolean byte in SegmentRead")
    if n < 0:
        raise ProtocolError(f"negative buffer length {n}")
    start = r.take(n)
    request_id = r.i64() if r.pos < r.end else NO_REQUEST_ID
    return SegmentRead(
        segment, offset, at_tail, end_of_segment, r.mv[start : start + n], request_id
    )


def _encode_segment_read(cmd: SegmentRead) -> list[bytes | bytearray | memoryview]:
    w = Writer()
    w.string(cmd.segment)
    w.cur += _SR_FLAGS.pack(cmd.offset, cmd.at_tail, cmd.end_of_segment, len(cmd.data))
    w.raw(cmd.data)
    w.i64(cmd.request_id)
    return w.finish(10)


override_codec(AppendBlockEnd, decode=_decode_append_block_end, encode=_encode_append_block_end)
override_codec(DataAppended, decode=_decode_data_appended, encode=_encode_data_appended)
override_codec(SegmentRead, decode=_decode_segment_read, encode=_encode_segment_read)
