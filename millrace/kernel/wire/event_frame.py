"""How an event lies in a segment: an 8-byte header (type 0, payload length), then the payload.

Pravega's writers frame every event this way (``WireCommands.Event``); the client frames and
splits events with it (``millrace.client.events``), the segment store finds event boundaries
with it (``segment_app.server.locate``) and the Spark bridge decodes whole batches with it.
"""

from __future__ import annotations

import struct

__all__ = ["EVENT_BYTES_MAX", "EVENT_HEADER", "EVENT_TYPE"]

#: The header: type, then payload length (big-endian ints).
EVENT_HEADER = struct.Struct(">ii")
#: The type of an event (Pravega's ``WireCommandType.EVENT``).
EVENT_TYPE = 0
#: Pravega's largest event.
EVENT_BYTES_MAX = 8 * 1024 * 1024
