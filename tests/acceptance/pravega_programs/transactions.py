"""A transaction committed and one aborted; a reader sees exactly the committed events."""

from __future__ import annotations

import sys

from common import answer, manager, read_events

m = manager()
scope = sys.argv[2]
m.create_scope(scope)
m.create_stream(scope, "payments", 2)
writer = m.create_transaction_writer(scope, "payments", 42)
kept = writer.begin_txn()
for i in range(20):
    kept.write_event(f"committed-{i}", routing_key=f"k{i % 5}")
open_before = kept.is_open()
kept.commit()
dropped = writer.begin_txn()
for i in range(20):
    dropped.write_event(f"aborted-{i}", routing_key=f"k{i % 5}")
dropped.abort()
after = m.create_writer(scope, "payments")
after.write_event("after-0", routing_key="k0")
after.flush()
group = m.create_reader_group("audit", scope, "payments", False)
reader = group.create_reader("r1")
events = read_events(reader, 21)
reader.reader_offline()
answer(
    {
        "open_before": open_before,
        "open_after": kept.is_open(),
        "aborted_open": dropped.is_open(),
        "events": sorted(events),
    }
)
