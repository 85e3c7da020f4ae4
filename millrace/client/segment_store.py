"""Client of the segment store wire protocol: one connection, its calls and its appends.

Responsibility: ``SegmentStoreClient`` is one TCP connection to a segment store (Pravega's wire
protocol v17, see ``docs/components/wire-protocol.md``): ``await SegmentStoreClient.connect(...)``
connects and says Hello, and the client then offers

* request/response calls (create, info, read, seal, truncate, delete, merge, attributes), any
  number outstanding at once (``millrace.client.calls``);
* append sessions: ``setup_append``, ``append_block``, ``flush``, ``conditional_append``
  (``millrace.client.appends``), and ``append_many`` over many writers at once
  (``millrace.client.append_many``);

on a ``millrace.client.connection.Connection`` (the transport: send queue, congestion, reply
matching). Error replies become the exceptions of ``millrace.client.errors`` (importable from
here). A lost connection fails every pending call; appends fail with ``AppendsLostError``
listing the unacked event numbers and payloads, so a caller can reconnect, ``setup_append``
again and resend the events numbered above the returned last event number (the server drops
duplicates).

``millrace.client.sync.SyncSegmentStoreClient`` runs it on a private event loop in a thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from millrace.client.append_blocks import AppendAck, AppendLimits, WriterHandle
from millrace.client.append_many import AppendMany
from millrace.client.calls import NULL_ATTRIBUTE_VALUE, ReadResult, SegmentInfo
from millrace.client.errors import (
    AppendsLostError,
    AuthTokenCheckFailedError,
    BadEventNumberError,
    BadOffsetError,
    ConnectionLostError,
    ContainerOfflineError,
    DeliveryTimeoutError,
    InvalidArgumentError,
    OperationUnsupportedError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentStoreError,
    SegmentTruncatedError,
    ServerError,
    error_from_reply,
)
from millrace.kernel import wire

__all__ = [
    "NO_EVENT_NUMBER",
    "NULL_ATTRIBUTE_VALUE",
    "AppendAck",
    "AppendLimits",
    "AppendsLostError",
    "AuthTokenCheckFailedError",
    "BadEventNumberError",
    "BadOffsetError",
    "ConnectionLostError",
    "ContainerOfflineError",
    "DeliveryTimeoutError",
    "InvalidArgumentError",
    "OperationUnsupportedError",
    "ReadResult",
    "SegmentExistsError",
    "SegmentInfo",
    "SegmentNotFoundError",
    "SegmentSealedError",
    "SegmentStoreClient",
    "SegmentStoreError",
    "SegmentTruncatedError",
    "ServerError",
    "WriterHandle",
    "error_from_reply",
]

NO_EVENT_NUMBER = wire.NO_EVENT_NUMBER


class SegmentStoreClient(AppendMany):
    """An async connection to one segment store. Use ``await SegmentStoreClient.connect(...)``."""

    @classmethod
    async def connect(cls, host: str, port: int, **kwargs: Any) -> SegmentStoreClient:
        """Open a connection and exchange Hello (raises ConnectionLostError on a version clash)."""
        client = cls(**kwargs)
        loop = asyncio.get_running_loop()
        await loop.create_connection(lambda: client._conn, host, port)
        await client._conn.handshake()
        return client

    async def close(self) -> None:
        await self._conn.close()

    async def __aenter__(self) -> SegmentStoreClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def is_closed(self) -> bool:
        return self._conn.lost is not None
