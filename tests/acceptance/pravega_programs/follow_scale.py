"""A writer and a reader that go on across scales of the stream (made by the operator over
REST while they run): every event is read once, in order per routing key."""

from __future__ import annotations

import sys

from common import answer, manager, read_events, wait_for

m = manager()
scope, count = sys.argv[2], int(sys.argv[3])
signal_file = sys.argv[4]
m.create_scope(scope)
m.create_stream(scope, "growing", 1)
writer = m.create_writer(scope, "growing")
group = m.create_reader_group("follow", scope, "growing", False)
reader = group.create_reader("r1")
for i in range(count):
    if i == count // 3:
        wait_for(signal_file, "scale")
    writer.write_event(f"k{i % 4}:{i}", routing_key=f"k{i % 4}")
writer.flush()
events = read_events(reader, count)
reader.reader_offline()
answer({"events": events})
