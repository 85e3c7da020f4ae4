"""The segment store's TCP wire server: Pravega's wire protocol in front of a SegmentStoreAPI.

Responsibility: listen, hold the server-wide pieces every connection shares (the store, the
token authorizer, the request handlers, the limits), and stop cleanly. Per-connection behaviour
lives in ``segment_app.server.connection``; the request handlers in ``segment_app.server.requests``;
the error-to-reply mapping in ``segment_app.server.replies``.

Configuration is a frozen ``ServerConfig``; the token secret is passed in (``node`` reads it from
``MILLRACE_TOKEN_SECRET``), never read from the environment here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from millrace.kernel import event_loop
from millrace.kernel.claims import TokenKeys, TokenVerifier
from millrace.kernel.config import SegmentStoreSettings
from segment_app.engine.api import SegmentStoreAPI
from segment_app.engine.tables import TableSegments
from segment_app.server.auth import AllowAll, Authorizer
from segment_app.server.connection import WireConnection
from segment_app.server.quotas import ScopeThrottles
from segment_app.server.requests import RequestHandlers, RequestSettings
from segment_app.server.schema_guard import SchemaGuard
from segment_app.server.traffic import TrafficMonitor

__all__ = ["READ_TAIL_WAIT_SECONDS_MAX", "SegmentStoreServer", "ServerConfig"]

log = logging.getLogger(__name__)

#: A tail read must answer well before the Pravega client's 30 s request timeout.
READ_TAIL_WAIT_SECONDS_MAX = 25.0


@dataclasses.dataclass(frozen=True, slots=True)
class ServerConfig:
    """How the wire server listens and what it allows."""

    #: Interface to listen on.
    host: str = SegmentStoreSettings.host
    #: TCP port (Pravega's default 12345); 0 picks a free port (see ``SegmentStoreServer.port``).
    port: int = SegmentStoreSettings.port
    #: Check delegation tokens (JWT, HS256) on every request that carries one.
    auth_enabled: bool = True
    #: Shared secret the tokens are signed with (required when ``auth_enabled``) ...
    token_secret: str = dataclasses.field(default="", repr=False)
    #: ... unless this keyring file (a rotation's) names the secrets (``TokenKeys``).
    token_keyring: Path | None = None
    #: Retiring secrets verify until their time (off: TEST-ONLY ``no-token-overlap``).
    token_overlap: bool = True
    #: How long a read at the tail of an open segment waits for data before answering empty.
    read_tail_wait_seconds: float = SegmentStoreSettings.read_tail_wait_seconds
    #: Most bytes in one SegmentRead reply (Java: 2 MiB).
    read_reply_bytes_max: int = 2 * 1024 * 1024
    #: Appends pending per connection before the server stops reading from it ...
    appends_in_flight_max: int = 1024
    #: ... or bytes of pending appends per connection.
    append_bytes_in_flight_max: int = 64 * 1024 * 1024
    #: Other requests pending per connection before the server stops reading from it.
    requests_in_flight_max: int = 64
    #: Append sessions (writer ids set up) per connection; more SetupAppends are refused.
    writers_per_connection_max: int = 10_000
    #: The traffic monitor's decision window (MILLRACE_AUTOSCALE_WINDOW_S; ``traffic.py``).
    autoscale_window_s: float = SegmentStoreSettings.autoscale_window_s
    #: Count acknowledged appends in the traffic monitor (off only to measure its cost).
    traffic_monitor: bool = SegmentStoreSettings.traffic_monitor
    #: Size of each connection's reusable receive buffer.
    receive_buffer_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        if not 0 <= self.read_tail_wait_seconds <= READ_TAIL_WAIT_SECONDS_MAX:
            raise ValueError(
                f"read_tail_wait_seconds must be within 0..{READ_TAIL_WAIT_SECONDS_MAX}"
            )
        if self.read_reply_bytes_max < 8:
            raise ValueError("read_reply_bytes_max must be at least 8")
        limits = (
            self.appends_in_flight_max,
            self.append_bytes_in_flight_max,
            self.requests_in_flight_max,
            self.writers_per_connection_max,
        )
        if min(limits) < 1:
            raise ValueError("in-flight and writer limits must be positive")


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
        self._server = await loop.create_server(
            lambda: WireConnection(self),
            self.config.host,
            self.config.port,
            reuse_address=True,
            ssl=self.tls,
        )
        log.info(
            "wire server listening on %s://%s:%d (event loop: %s)",
            "tls" if self.tls else "tcp", self.config.host, self.port, event_loop.name_of(loop),
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
