"""Events written through one controller while the container serving the stream moves to
another node (the test moves it when this program says it is waiting), then read through the
other controller: the client looks the moved segment up again by itself."""

from __future__ import annotations

import sys

import pravega_client
from common import answer, read_events, wait_for

first, second, scope, count, signal_file = sys.argv[1:6]
count_ = int(count)
writing = pravega_client.StreamManager(first, True, False)
reading = pravega_client.StreamManager(second, True, False)
writing.create_scope(scope)
writing.create_stream(scope, "moving", 2)
writer = writing.create_writer(scope, "moving")
group = reading.create_reader_group("movers", scope, "moving", False)
reader = group.create_reader("r1")
for i in range(count_):
    if i == count_ // 2:
        writer.flush()
        wait_for(signal_file, "move")
    writer.write_event(f"k{i % 4}:{i}", routing_key=f"k{i % 4}")
writer.flush()
events = read_events(reader, count_, timeout=120)
reader.reader_offline()
answer({"events": events})
