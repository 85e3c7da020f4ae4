"""Byte streams against a real standalone node: write, conditional write, seek, read, truncate,
head and tail offsets, sealing."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from millrace.client.byte_stream import ByteStreamTruncatedError, ConditionalAppendFailedError
from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import Standalone


@pytest.fixture
def manager(standalone: Standalone) -> Iterator[tuple[StreamManager, str]]:
    scope = f"b{uuid.uuid4().hex[:10]}"
    manager = StreamManager(standalone.base, token=standalone.token)
    manager.create_scope(scope)
    try:
        yield manager, scope
    finally:
        manager.close()


def test_write_seek_read_truncate(manager: tuple[StreamManager, str]) -> None:
    sm, scope = manager
    stream = sm.create_byte_stream(scope, "log")
    assert (stream.current_head_offset(), stream.current_tail_offset()) == (0, 0)
    assert stream.write(b"hello ") == 6
    assert stream.write_conditional(b"world", expected_offset=6) == 11
    with pytest.raises(ConditionalAppendFailedError, match=r"tail of .* is at 11, not 6"):
        stream.write_conditional(b"!", expected_offset=6)
    blob = bytes(range(256)) * 4096  # 1 MiB, raw bytes (no event framing)
    stream.write(blob)
    stream.flush()
    assert stream.current_tail_offset() == 11 + len(blob)
    assert stream.read(11) == b"hello world"
    assert stream.tell() == 11
    got = b""
    while len(got) < len(blob):
        got += stream.read(len(blob) - len(got))
    assert got == blob
    assert stream.seek(-5, whence=2) == 11 + len(blob) - 5
    assert stream.read(100) == blob[-5:]
    with pytest.raises(TimeoutError):
        stream.read(10, timeout=0.5)  # at the tail: nothing yet
    stream.truncate(6)
    assert stream.current_head_offset() == 6
    stream.seek(0)
    with pytest.raises(ByteStreamTruncatedError) as info:
        stream.read(5)
    assert info.value.head == 6
    stream.seek(info.value.head)
    assert stream.read(5) == b"world"
    stream.close()


def test_a_reader_at_the_tail_gets_new_bytes_and_the_end_after_seal(
    manager: tuple[StreamManager, str],
) -> None:
    sm, scope = manager
    writer = sm.create_byte_stream(scope, "live")
    reader = sm.create_byte_stream(scope, "live")
    received: list[bytes] = []

    def follow() -> None:
        while chunk := reader.read(4096, timeout=30):
            received.append(chunk)

    follower = threading.Thread(target=follow)
    follower.start()
    for i in range(20):
        writer.write(f"line {i}\n".encode())
    writer.flush()
    writer.seal()
    follower.join(30)
    assert not follower.is_alive()
    assert b"".join(received) == b"".join(f"line {i}\n".encode() for i in range(20))
    reader.close()
    writer.close()


def test_a_stream_of_several_segments_is_not_a_byte_stream(
    manager: tuple[StreamManager, str],
) -> None:
    sm, scope = manager
    sm.create_stream(scope, "wide", initial_segments=2)
    with pytest.raises(ValueError, match="has 2 segments; a byte stream has one"):
        sm.create_byte_stream(scope, "wide")
