"""Each key of a list (a JSON file, one event per key, the event being the key) written with a
routing key through Pravega's writer to a stream of ``segments`` segments; the test reads back
which segment each landed in."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from common import answer, manager

m = manager()
scope, segments, keys_file = sys.argv[2], int(sys.argv[3]), sys.argv[4]
keys = json.loads(Path(keys_file).read_text(encoding="utf-8"))
m.create_scope(scope)
m.create_stream(scope, "routed", segments)
writer = m.create_writer(scope, "routed")
for key in keys:
    writer.write_event(key, routing_key=key)
writer.flush()
answer({"written": len(keys)})
