"""Millrace's Python client SDK (no Django: programs and Spark executors import it).

The public names, importable from here:

* ``StreamManager`` / ``AsyncStreamManager``: scopes, streams, writers, readers, reader groups,
  transactions and byte streams over a node's REST API and the wire protocol;
* ``StreamCut``: a position across a stream;
* ``TxnFailedError``: a transaction that can no longer be written to (aborted meanwhile);
* ``SegmentStoreClient`` (asyncio) and ``SyncSegmentStoreClient``: one connection to a segment
  store over Pravega's wire protocol, and the errors it raises (``millrace.client.errors``).

Its other modules:

* ``admin``: managing a node: one method a REST call (``AdminCalls``; ``StreamManager.admin``)
* ``batch``: batch reads, as Pravega's ``BatchClient``
* ``blocking_readers``: the blocking readers
* ``blocking_writer``: the blocking event writer
* ``byte_stream``: byte streams
* ``controller``: the client's side of the controller
* ``events``: events as they lie in a segment
* ``follower``: following a stream
* ``inflight``: an event writer's unacknowledged events (back-pressure, draining)
* ``kvt``: key-value tables from Python, in the shape of Pravega's ``KeyValueTableManager`` and
  ``KeyValueTable``
* ``manager``: ``StreamManager``
* ``pravega_compat``: Pravega's Python client API (the ``pravega`` package's ``pravega_client``,
  0.3.x) on Millrace
* ``reader_group``: reader groups in the client
* ``resumable``: one idempotent writer's appends to one segment, held until acknowledged and
  resumed wherever the segment is served after its node fails
* ``retry``: which failures a client rides through, and which reach its caller at once
* ``routing``: routing keys to points of the key space [0, 1), and points to a stream's segments
* ``streamcut``: stream cuts as values
* ``transport``: the client's transport
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
