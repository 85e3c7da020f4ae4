"""One shared async connection per segment store node, reopened when it is lost.

Readers that talk to many segments (a WebSocket tail reader, a reader group) share one
connection per node instead of opening one per segment. ``SegmentStorePool.get(host, port)``
returns a connected ``SegmentStoreClient``; a closed or lost one is replaced on the next call.
A closed pool opens no connection again (``get`` raises ``ConnectionLostError``).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from millrace.client.transport.segment_store import ConnectionLostError, SegmentStoreClient


class SegmentStorePool:
    """Connections of one event loop, by ``(host, port)``."""

    def __init__(self, **client_options: Any) -> None:
        #: ``SegmentStoreClient.connect``'s options (``ssl``: TLS to the nodes, ...).
        self.client_options = client_options
        self._clients: dict[tuple[str, int], SegmentStoreClient] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        #: The last failed attempt to connect to each node: when, and what it raised.
        self._failures: dict[tuple[str, int], tuple[float, Exception]] = {}
        self._closed = False

    @property
    def delegation_token(self) -> str:
        """The connections' delegation token as first given."""
        return str(self.client_options.get("delegation_token", ""))

    @property
    def token_refresh(self) -> Callable[[], Awaitable[str]] | None:
        """What renews the token when the segment store says it expired (or ``None``)."""
        return self.client_options.get("token_refresh")

    @classmethod
    async def for_stream(
        cls, controller: Any, scope: str, stream: str, **client_options: Any
    ) -> SegmentStorePool:
        """A pool whose connections carry the stream's delegation token from ``controller``,
        asked for again when the segment store says it has expired (tokens last
        MILLRACE_TOKEN_TTL_SECONDS; writers and readers live longer)."""
        fetch = functools.partial(controller.delegation_token, scope, stream)
        return cls(
            delegation_token=await fetch(), token_refresh=fetch, ssl=controller.tls,
            **client_options,
        )  # fmt: skip

    async def get(self, host: str, port: int) -> SegmentStoreClient:
        """The connection to ``host:port``, opened if it is not. Callers that waited while
        another's attempt failed get that failure at once rather than trying again in turn
        (many writers of one partitioned node would otherwise each wait out the connect
        timeout, one after the other)."""
        key = (host, port)
        client = self._clients.get(key)
        if client is not None and not client.is_closed:
            return client
        asked = time.monotonic()
        async with self._locks.setdefault(key, asyncio.Lock()):
            if self._closed:  # a reader still running must not open what nobody would close
                raise ConnectionLostError("the connection pool is closed")
            client = self._clients.get(key)
            if client is not None and not client.is_closed:
                return client
            failed = self._failures.get(key)
            if failed is not None and failed[0] >= asked:
                raise failed[1]
            try:
                client = await SegmentStoreClient.connect(host, port, **self.client_options)
            except (OSError, ConnectionLostError) as exc:
                self._failures[key] = (time.monotonic(), exc)
                raise
            self._failures.pop(key, None)
            if self._closed:
                await client.close()
                raise ConnectionLostError("the connection pool is closed")
            self._clients[key] = client
            return client

    async def close(self) -> None:
        """Close every connection; the pool opens none after this."""
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()
