"""A byte stream: write, flush, seek, read back, truncate the head."""

from __future__ import annotations

import sys

from common import answer, manager

m = manager()
scope = sys.argv[2]
m.create_scope(scope)
m.create_stream(scope, "blob", 1)
stream = m.create_byte_stream(scope, "blob")
payload = bytes(range(256)) * 64
stream.write(payload)
stream.flush()
tail = stream.current_tail_offset()
stream.seek(100, 0)
buffer = bytearray()
while len(buffer) < 1000:
    chunk = bytearray(1000 - len(buffer))
    buffer += chunk[: stream.readinto(chunk) or 0]
stream.truncate(4096)
answer(
    {
        "tail": tail,
        "read_matches": bytes(buffer) == payload[100:1100],
        "head": stream.current_head_offset(),
    }
)
