"""One call of a user whose grants are being tried (its credentials: Pravega's environment
variables, user name and password): ``write SCOPE STREAM`` one event, or ``read SCOPE STREAM
GROUP COUNT`` through a reader group it creates. Prints ``{"ok": ..., "error": ...}``."""

from __future__ import annotations

import sys

from common import answer, manager, read_events

action, scope, stream = sys.argv[2], sys.argv[3], sys.argv[4]
try:
    m = manager()
    if action == "write":
        writer = m.create_writer(scope, stream)
        writer.write_event("from pravega", routing_key="k")
        writer.flush()
        answer({"ok": True})
    group_name, count = sys.argv[5], int(sys.argv[6])
    group = m.create_reader_group(group_name, scope, stream, False)
    events = read_events(group.create_reader("r1"), count, timeout=30)
    answer({"ok": True, "events": len(events)})
except Exception as exc:  # what Pravega's client says when it is refused
    answer({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
