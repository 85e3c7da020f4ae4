"""What the wire server hands each of its connections: its configuration and shared pieces.

Responsibility: ``ServerConfig``, how the wire server listens and what it allows, and
``ConnectionServices``, the server-wide pieces a connection and its append path work with (the
store, the request handlers, the traffic monitor, the schema guard, the quotas, the set of
live connections), passed to each connection when it is made. So neither a connection nor its
append path reaches back into the server that made it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from millrace.kernel.config import SegmentStoreSettings
from segment_app.engine.api import SegmentStoreAPI
from segment_app.server.quotas import ScopeThrottles
from segment_app.server.requests import RequestHandlers
from segment_app.server.schema_guard import SchemaGuard
from segment_app.server.traffic import TrafficMonitor

__all__ = ["READ_TAIL_WAIT_SECONDS_MAX", "ConnectionServices", "ServerConfig"]

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


@dataclasses.dataclass(frozen=True, slots=True)
class ConnectionServices:
    """The server-wide pieces every connection of one server shares."""

    config: ServerConfig
    store: SegmentStoreAPI
    requests: RequestHandlers
    traffic: TrafficMonitor
    #: Holds appends to their streams' schemas (None: not at all).
    schema_guard: SchemaGuard | None
    #: Scopes' quotas (a node with a quota source), else None.
    quotas: ScopeThrottles | None
    #: The server's live connections (each adds itself when made, removes itself when lost).
    connections: set[Any]
