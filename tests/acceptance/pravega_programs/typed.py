"""A framed event (Confluent's header, schema id ARGV[3]) and then an unframed one through a
writer. The first write returns; the second, to a stream whose schema enforcement refuses the
unframed event, does not (Pravega's writer ignores the refusal and waits for an answer until
its write timeout, then says "Write timed out"), so the program gives it ``seconds`` with
``write_event_async`` and says whether it was written."""

from __future__ import annotations

import asyncio
import sys

from common import answer, manager

m = manager()
scope, schema_id, seconds = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
writer = m.create_writer(scope, "st")
writer.write_event_bytes(b"\x00" + schema_id.to_bytes(4, "big") + b"\x02", "k")
writer.flush()


async def second() -> bool:
    try:
        await asyncio.wait_for(writer.write_event_async("not framed", "k"), seconds)
    except TimeoutError:
        return False
    return True


answer({"second_write_returned": asyncio.run(second())})
