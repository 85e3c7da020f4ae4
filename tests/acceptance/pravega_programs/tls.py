"""Over TLS (a ``tls://`` controller URI; the CA in ``pravega_client_tls_cert_path``, as
Pravega's client reads it): a stream written and read back."""

from __future__ import annotations

import sys

from common import answer, manager, read_events

m = manager()
scope = sys.argv[2]
m.create_scope(scope)
m.create_stream(scope, "sealed-in-transit", 2)
writer = m.create_writer(scope, "sealed-in-transit")
for i in range(50):
    writer.write_event(f"secret-{i}", routing_key=f"k{i % 5}")
writer.flush()
group = m.create_reader_group("tls-readers", scope, "sealed-in-transit", False)
reader = group.create_reader("r1")
events = read_events(reader, 50)
reader.reader_offline()
answer({"events": sorted(events)})
