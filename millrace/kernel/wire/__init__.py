"""Pravega's segment store wire protocol (v17): commands, frame codec, and stream framing.

``decode_frame(type, payload)`` turns one frame into a command dataclass (or raises
``ProtocolError``); ``encode_frame(cmd)`` / ``encode_parts(cmd)`` turn it back into bytes;
``FrameAssembler`` splits a received byte stream into frames. Part of the Django-free kernel:
shared by the wire server (``segment_app.server``), the Python client (``millrace.client``)
and the token code (``controller_app.access.tokens``).

Its other modules:

* ``event_frame``: how an event lies in a segment
* ``fastpath``: hand-tuned codecs of the append and read paths
* ``segment_commands``: wire commands of segment lifecycle, merges, attributes, and the error
  replies
* ``table_commands``: table-segment wire commands (type codes 68-88) and their sub-structures
"""

from . import fastpath  # noqa: F401  (installs the hand-tuned codecs)
from .codec import *  # noqa: F403
from .codec import __all__ as _codec_all
from .commands import *  # noqa: F403
from .commands import __all__ as _commands_all
from .framing import FrameAssembler, FramingError
from .segment_commands import *  # noqa: F403
from .segment_commands import __all__ as _segment_all
from .table_commands import *  # noqa: F403
from .table_commands import __all__ as _table_all

__all__ = [
    *_codec_all,
    *_commands_all,
    *_segment_all,
    *_table_all,
    "FrameAssembler",
    "FramingError",
]
