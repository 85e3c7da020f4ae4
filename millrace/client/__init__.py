"""Millrace's Python client SDK (no Django: programs and Spark executors import it).

The public names, importable from here:

* ``StreamManager`` / ``AsyncStreamManager``: scopes, streams, writers, readers, reader groups,
  transactions and byte streams over a node's REST API and the wire protocol;
* ``StreamCut``: a position across a stream;
* ``TxnFailedError``: a transaction that can no longer be written to (aborted meanwhile);
* ``SegmentStoreClient`` (asyncio) and ``SyncSegmentStoreClient``: one connection to a segment
  store over Pravega's wire protocol, and the errors it raises (``millrace.client.errors``).
"""

from millrace.client.errors import *  # noqa: F403
from millrace.client.errors import __all__ as _errors
from millrace.client.manager import AsyncStreamManager, StreamManager
from millrace.client.streamcut import StreamCut
from millrace.client.transactions import TxnFailedError
from millrace.client.transport.segment_store import SegmentStoreClient
from millrace.client.transport.sync import SyncSegmentStoreClient

__all__ = [
    *_errors,
    "AsyncStreamManager",
    "SegmentStoreClient",
    "StreamCut",
    "StreamManager",
    "SyncSegmentStoreClient",
    "TxnFailedError",
]
