"""Client of the segment store wire protocol: one connection and what runs on it.

Responsibility: ``SegmentStoreClient`` is one TCP connection to a segment store (Pravega's wire
protocol v17, see ``docs/components/wire-protocol.md``): ``await SegmentStoreClient.connect(...)``
connects and says Hello. It is made of four parts, each with a small interface:

* ``connection`` (``millrace.client.transport.connection.Connection``): the transport: send
  queue, congestion, reply matching;
* ``calls`` (``millrace.client.transport.calls.SegmentCalls``): request/response calls (create,
  info, read, seal, truncate, delete, merge, attributes), any number outstanding at once;
* ``appends`` (``millrace.client.transport.appends.AppendSessions``): the writers' append
  sessions: ``setup_append``, ``append_block``, ``flush`` and ``conditional_append``, with
  ``append_many`` over many writers at once (``millrace.client.transport.append_many``);
* ``tables`` (``millrace.client.transport.table_calls.TableCalls``): the table-segment calls
  (key-value tables), reached as ``client.tables``;

and offers the methods of ``calls`` and ``appends`` as its own. Error replies become the
exceptions of ``millrace.client.errors`` (importable from here). A lost connection fails every
pending call; appends fail with ``AppendsLostError`` listing the unacked event numbers and
payloads, so a caller can reconnect, ``setup_append`` again and resend the events numbered
above the returned last event number (the server drops duplicates).

``millrace.client.transport.sync.SyncSegmentStoreClient`` runs one for blocking code.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from ssl import SSLContext
from typing import Any

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
    SchemaRefusedError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentStoreError,
    SegmentTruncatedError,
    ServerError,
    error_from_reply,
)
from millrace.client.transport.append_blocks import AppendAck, AppendLimits, WriterHandle
from millrace.client.transport.append_many import AppendMany
from millrace.client.transport.appends import AppendSessions
from millrace.client.transport.calls import (
    NULL_ATTRIBUTE_VALUE,
    READ_BYTES_DEFAULT,
    ReadResult,
    SegmentCalls,
    SegmentInfo,
)
from millrace.client.transport.connection import CONNECT_S, KEEPALIVE_S, Connection
from millrace.client.transport.table_calls import TableCalls
from millrace.kernel import defaults, wire
from millrace.kernel.tls import TlsRefused, refusal

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
    "SchemaRefusedError",
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


class SegmentStoreClient:
    """An async connection to one segment store. Use ``await SegmentStoreClient.connect(...)``."""

    def __init__(
        self,
        *,
        delegation_token: str = "",
        request_timeout: float = 30.0,
        limits: AppendLimits | None = None,
        token_refresh: Callable[[], Awaitable[str]] | None = None,
        keepalive_s: float = KEEPALIVE_S,
        silence_s: float = defaults.CLIENT_SILENCE_SECONDS,
    ) -> None:
        """``keepalive_s``, ``silence_s``: the liveness watch (``Connection``): a KeepAlive
        after that long without a byte from the node, the connection given up after this."""
        self.connection = Connection(request_timeout, keepalive_s=keepalive_s, silence_s=silence_s)
        self.calls = SegmentCalls(
            self.connection, delegation_token=delegation_token, token_refresh=token_refresh
        )
        self.appends = AppendSessions(self.calls, limits=limits)
        #: Table-segment calls (``TableCalls``).
        self.tables = TableCalls(self.calls)
        # The append path's methods, bound once: no call in between on the path of each event.
        appends = self.appends
        self.setup_append = appends.setup_append
        self.acked_event_number = appends.acked_event_number
        self.writer_handle = appends.writer_handle
        self.append_block = appends.append_block
        self.append_event = appends.append_event
        self.append_many = AppendMany(appends).append_many
        self.flush = appends.flush
        self.conditional_append = appends.conditional_append

    @classmethod
    async def connect(
        cls, host: str, port: int, *, ssl: SSLContext | None = None, **kwargs: Any
    ) -> SegmentStoreClient:
        """Open a connection (over TLS with ``ssl``) and exchange Hello. Raises
        ConnectionLostError on a version clash and ``TlsRefused``, saying why, when TLS is
        wrong on either side (a plaintext client on a TLS port, an unknown CA ...)."""
        client = cls(**kwargs)
        loop = asyncio.get_running_loop()
        try:
            # A node that does not answer (partitioned: SYNs go unanswered for minutes) or
            # accepts and never says Hello (paused) is given up after CONNECT_S.
            await asyncio.wait_for(
                client._open(loop, host, port, ssl),
                CONNECT_S if client.connection.silence_s else None,
            )
        except TimeoutError:
            client.connection.abort(ConnectionLostError("connect timed out"))
            raise ConnectionLostError(
                f"segment store {host}:{port} did not accept and greet a connection within"
                f" {CONNECT_S:g} s (partitioned, paused or down)"
            ) from None
        except (OSError, ConnectionLostError) as exc:
            client.connection.abort(ConnectionLostError(str(exc)))
            if client.connection.silent:  # (a paused node: no TLS probe of it either)
                raise
            where, cause = f"segment store {host}:{port}", exc.__cause__ or exc
            reason = await refusal(
                cause, host, port, where, tls=ssl is not None,
                fix="use an https:// (or tls://) controller URL",
                closed=isinstance(exc, ConnectionLostError),
            )  # fmt: skip
            if reason is not None:
                raise TlsRefused(reason) from None
            raise
        return client

    async def _open(
        self, loop: asyncio.AbstractEventLoop, host: str, port: int, ssl: SSLContext | None
    ) -> None:
        await loop.create_connection(lambda: self.connection, host, port, ssl=ssl)
        await self.connection.handshake()

    @property
    def delegation_token(self) -> str:
        """The token of the calls that pass none (renewed by ``token_refresh``)."""
        return self.calls.delegation_token

    @delegation_token.setter
    def delegation_token(self, token: str) -> None:
        self.calls.delegation_token = token

    @property
    def token_refresh(self) -> Callable[[], Awaitable[str]] | None:
        return self.calls.token_refresh

    @token_refresh.setter
    def token_refresh(self, refresh: Callable[[], Awaitable[str]] | None) -> None:
        self.calls.token_refresh = refresh

    @property
    def limits(self) -> AppendLimits:
        return self.appends.limits

    # -- the request/response calls (``SegmentCalls``) --------------------------------------------

    async def create_segment(self, segment: str, *, token: str | None = None) -> None:
        await self.calls.create_segment(segment, token=token)

    async def get_info(self, segment: str, *, token: str | None = None) -> SegmentInfo:
        return await self.calls.get_info(segment, token=token)

    async def read_segment(
        self, segment: str, offset: int, length: int = READ_BYTES_DEFAULT, *,
        token: str | None = None,
    ) -> ReadResult:  # fmt: skip
        """Up to ``length`` bytes at ``offset``; at the tail the server waits a little for data."""
        return await self.calls.read_segment(segment, offset, length, token=token)

    async def locate_offset(
        self, segment: str, target_offset: int, *, token: str | None = None
    ) -> int:
        """The first event boundary at or after ``target_offset``."""
        return await self.calls.locate_offset(segment, target_offset, token=token)

    async def seal(self, segment: str, *, token: str | None = None) -> None:
        await self.calls.seal(segment, token=token)

    async def truncate(self, segment: str, offset: int, *, token: str | None = None) -> None:
        await self.calls.truncate(segment, offset, token=token)

    async def delete(self, segment: str, *, token: str | None = None) -> None:
        await self.calls.delete(segment, token=token)

    async def merge(self, target: str, source: str, *, token: str | None = None) -> int:
        """Append all of ``source`` to ``target`` and delete it; returns the new target length."""
        return await self.calls.merge(target, source, token=token)

    async def get_attribute(
        self, segment: str, attribute_id: uuid.UUID, *, token: str | None = None
    ) -> int:
        return await self.calls.get_attribute(segment, attribute_id, token=token)

    async def update_attribute(
        self, segment: str, attribute_id: uuid.UUID, new_value: int,
        expected_value: int = NULL_ATTRIBUTE_VALUE, *, token: str | None = None,
    ) -> bool:  # fmt: skip
        """Set the attribute if its value is ``expected_value`` (NULL: absent); False if not."""
        return await self.calls.update_attribute(
            segment, attribute_id, new_value, expected_value, token=token
        )

    # -- the connection ---------------------------------------------------------------------------

    async def close(self) -> None:
        await self.connection.close()

    async def __aenter__(self) -> SegmentStoreClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def is_closed(self) -> bool:
        return self.connection.lost is not None
