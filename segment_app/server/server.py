"""The segment store's TCP wire server: Pravega's wire protocol in front of a SegmentStoreAPI.

Responsibility: listen, hold the server-wide pieces every connection shares (the store, the
token authorizer, the request handlers, the limits), and stop cleanly. Per-connection behaviour
lives in ``segment_app.server.connection``; the request handlers in ``segment_app.server.requests``;
the error-to-reply mapping in ``segment_app.server.replies``.

Configuration is a frozen ``ServerConfig`` (``segment_app.server.services``, with the pieces each
connection is handed); the token secret is passed in (``node`` reads it from
``MILLRACE_TOKEN_SECRET``), never read from the environment here.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable

from millrace.kernel import event_loop
from millrace.kernel.claims import TokenKeys, TokenVerifier
from segment_app.engine.api import SegmentStoreAPI
from segment_app.engine.tables import TableSegments
from segment_app.server.auth import AllowAll, Authorizer
from segment_app.server.connection import WireConnection
from segment_app.server.quotas import ScopeThrottles
from segment_app.server.requests import RequestHandlers, RequestSettings
from segment_app.server.schema_guard import SchemaGuard
from segment_app.server.services import ConnectionServices, ServerConfig
from segment_app.server.traffic import TrafficMonitor

__all__ = ["SegmentStoreServer"]

log = logging.getLogger(__name__)


class SegmentStoreServer:
    """Serves a ``SegmentStoreAPI`` over TCP; ``start`` / ``stop`` or ``async with``."""

    def __init__(
        self,
        store: SegmentStoreAPI,
        config: ServerConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.store = store
        self.config = config or ServerConfig()
        #: The port's TLS (None: plaintext); its certificate may be reloaded in place.
        self.tls = tls
        self.authorizer: Authorizer = AllowAll()
        if self.config.auth_enabled:
            keys = TokenKeys(
                self.config.token_secret, self.config.token_keyring, clock=clock,
                overlap=self.config.token_overlap,
            )  # fmt: skip
            self.authorizer = TokenVerifier(keys, clock=clock)
        settings = RequestSettings(
            self.config.read_tail_wait_seconds, self.config.read_reply_bytes_max
        )
        #: The table segments this server serves (their indexes live here).
        self.tables = TableSegments(store)
        self.requests = RequestHandlers(store, self.authorizer, settings, self.tables)
        self.connections: set[WireConnection] = set()
        self.traffic = TrafficMonitor(self.config.autoscale_window_s)
        #: Holds appends to their streams' schemas (None: not at all, no metadata to read).
        self.schema_guard: SchemaGuard | None = None
        #: Scopes' quotas (a node with a quota source), else None.
        self.quotas: ScopeThrottles | None = None
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The port actually listened on (useful with ``port=0``)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the server is not listening")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        services = self.services()
        self._server = await loop.create_server(
            lambda: WireConnection(services),
            self.config.host,
            self.config.port,
            reuse_address=True,
            ssl=self.tls,
        )
        log.info(
            "wire server listening on %s://%s:%d (event loop: %s)",
            "tls" if self.tls else "tcp", self.config.host, self.port, event_loop.name_of(loop),
        )  # fmt: skip

    def services(self) -> ConnectionServices:
        """What each connection is given (read when the server starts: the schema guard and
        the quotas are set before that)."""
        return ConnectionServices(
            self.config, self.store, self.requests, self.traffic, self.schema_guard,
            self.quotas, self.connections,
        )  # fmt: skip

    async def stop(self) -> None:
        """Stop listening and drop every connection (pending replies are lost)."""
        if self._server is None:
            return
        self._server.close()
        for connection in list(self.connections):
            connection.abort()
        await self._server.wait_closed()
        await self.tables.stop()
        self._server = None

    async def __aenter__(self) -> SegmentStoreServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
