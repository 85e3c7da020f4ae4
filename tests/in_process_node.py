"""Fixtures of in-process nodes: a real segment store on memory tiers, wire servers on free
ports, raw connections speaking frames. Imported by the conftest of each folder that uses them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from millrace.client.transport.segment_store import SegmentStoreClient
from millrace.kernel import wire as wire
from segment_app.engine.bootstrap import StoreSettings, build_segment_store
from segment_app.engine.config import SegmentStoreConfig
from segment_app.engine.store import SegmentStore
from segment_app.server.server import SegmentStoreServer
from segment_app.server.services import ServerConfig
from tiers.memory import clear_chunk_stores, clear_log_stores

SECRET = "test-secret-for-wire-tests-0123456789"


@pytest.fixture
async def store() -> AsyncIterator[SegmentStore]:
    clear_log_stores()
    clear_chunk_stores()
    settings = StoreSettings(
        tier1="memory", tier2="memory", store=SegmentStoreConfig(container_count=2)
    )
    segment_store = build_segment_store(settings)
    await segment_store.start()
    yield segment_store
    await segment_store.stop()
    clear_log_stores()
    clear_chunk_stores()


ServerFactory = Callable[..., Awaitable[SegmentStoreServer]]


@pytest.fixture
async def make_server(store: SegmentStore) -> AsyncIterator[ServerFactory]:
    servers: list[SegmentStoreServer] = []

    async def make(**overrides: Any) -> SegmentStoreServer:
        defaults: dict[str, Any] = {
            "port": 0,
            "auth_enabled": False,
            "token_secret": SECRET,
            "read_tail_wait_seconds": 0.3,
        }
        config = dataclasses.replace(ServerConfig(), **{**defaults, **overrides})
        server = SegmentStoreServer(store, config)
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


@pytest.fixture
async def server(make_server: ServerFactory) -> SegmentStoreServer:
    return await make_server()


@pytest.fixture
async def client(server: SegmentStoreServer) -> AsyncIterator[SegmentStoreClient]:
    c = await SegmentStoreClient.connect("127.0.0.1", server.port, request_timeout=10.0)
    yield c
    await c.close()


class RawConnection:
    """A bare TCP connection speaking frames, for byte-level tests."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int, *, hello: bool = True) -> RawConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = cls(reader, writer)
        if hello:
            await conn.send(wire.Hello(15, 5))
            assert await conn.recv() == wire.Hello(17, 5)
        return conn

    async def send(self, cmd: Any) -> None:
        await self.send_bytes(wire.encode_frame(cmd))

    async def send_bytes(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self, timeout: float = 5.0) -> Any:
        header = await asyncio.wait_for(self.reader.readexactly(8), timeout)
        type_code, length = struct.unpack(">ii", header)
        payload = await asyncio.wait_for(self.reader.readexactly(length), timeout)
        return wire.decode_frame(type_code, payload)

    async def closed_by_server(self, timeout: float = 5.0) -> bool:
        """Drain until EOF; True if the server closed the connection."""
        try:
            while await asyncio.wait_for(self.reader.read(65536), timeout):
                pass
        except ConnectionError:
            return True
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


@pytest.fixture
def open_raw() -> Callable[..., Awaitable[RawConnection]]:
    """``await open_raw(port, hello=True)``: a RawConnection (closed by the test)."""
    return RawConnection.open


@pytest.fixture
async def raw(server: SegmentStoreServer) -> AsyncIterator[RawConnection]:
    conn = await RawConnection.open(server.port)
    yield conn
    await conn.close()
