"""TLS on the wire port and the metrics port, in process: the refusals, each saying which, mutual
TLS, and a certificate replaced on disk while a connection is open.

Certificates are made by the tests (``trustme``, ``tests.acceptance.certs``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from millrace.client.transport.segment_store import SegmentStoreClient
from millrace.kernel.config import ConfigError, TlsSettings
from millrace.kernel.tls import CertificateReloader, TlsRefused, client_context, server_context
from segment_app.engine.store import SegmentStore
from segment_app.server.metrics import MetricsServer
from segment_app.server.server import SegmentStoreServer
from segment_app.server.services import ServerConfig
from segment_app.server.traffic import TrafficMonitor
from tests.acceptance.certs import Certs


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return Certs(tmp_path / "certs")


def tls_of(certs: Certs, cert: Path, key: Path, **more: str) -> TlsSettings:
    return TlsSettings.from_env(certs.env(cert, key, **more))


async def serve(store: SegmentStore, tls: ssl.SSLContext | None) -> SegmentStoreServer:
    config = dataclasses.replace(ServerConfig(), port=0, auth_enabled=False)
    server = SegmentStoreServer(store, config, tls=tls)
    await server.start()
    return server


@pytest.fixture
async def tls_server(
    store: SegmentStore, certs: Certs
) -> AsyncIterator[tuple[SegmentStoreServer, TlsSettings]]:
    tls = tls_of(certs, *certs.issue("node"))
    server = await serve(store, server_context(tls))
    yield server, tls
    await server.stop()


async def connect(port: int, context: ssl.SSLContext | None) -> SegmentStoreClient:
    return await SegmentStoreClient.connect("127.0.0.1", port, ssl=context, request_timeout=5)


async def test_a_client_with_the_ca_talks_tls(tls_server: tuple, certs: Certs) -> None:
    server, _ = tls_server
    client = await connect(server.port, client_context(str(certs.ca_file)))
    try:
        await client.create_segment("s/st/0.#epoch.0")
        assert (await client.get_info("s/st/0.#epoch.0")).write_offset == 0
        assert client.connection.transport.get_extra_info("ssl_object") is not None
    finally:
        await client.close()


async def test_a_plaintext_client_on_the_tls_port_is_told_so(tls_server: tuple) -> None:
    server, _ = tls_server
    with pytest.raises(TlsRefused, match="serves TLS and this client connects in plaintext"):
        await connect(server.port, None)


async def test_a_tls_client_on_a_plaintext_port_is_told_so(
    store: SegmentStore, certs: Certs
) -> None:
    server = await serve(store, None)
    try:
        with pytest.raises(TlsRefused, match="does not speak TLS"):
            await connect(server.port, client_context(str(certs.ca_file)))
    finally:
        await server.stop()


async def test_an_unknown_ca_is_named(tls_server: tuple) -> None:
    server, _ = tls_server
    with pytest.raises(TlsRefused, match=r"signed by an unknown CA.*MILLRACE_TLS_CA_FILE"):
        await connect(server.port, client_context(None))


@pytest.mark.parametrize("validate", [True, False], ids=["checked", "unchecked"])
async def test_a_certificate_for_another_host_is_refused(
    store: SegmentStore, certs: Certs, validate: bool
) -> None:
    """The host-name check, and the same connection with it switched off (Pravega's
    ``validateHostName=false``): then the wrong host is let in, so the check is what refuses."""
    tls = tls_of(certs, *certs.issue("other", "node-7.example"))
    server = await serve(store, server_context(tls))
    context = client_context(str(certs.ca_file), verify_hostname=validate)
    try:
        if validate:
            with pytest.raises(TlsRefused, match="certificate is for another host name"):
                await connect(server.port, context)
        else:
            await (await connect(server.port, context)).close()
    finally:
        await server.stop()


async def test_an_expired_certificate_is_named(store: SegmentStore, certs: Certs) -> None:
    tls = tls_of(certs, *certs.issue("old", expired=True))
    server = await serve(store, server_context(tls))
    try:
        with pytest.raises(TlsRefused, match="its TLS certificate has expired"):
            await connect(server.port, client_context(str(certs.ca_file)))
    finally:
        await server.stop()


async def test_mutual_tls_refuses_a_peer_without_a_certificate(
    store: SegmentStore, certs: Certs
) -> None:
    tls = tls_of(certs, *certs.issue("node"), MILLRACE_TLS_CLIENT_AUTH="1")
    server = await serve(store, server_context(tls))
    try:
        with pytest.raises(TlsRefused, match="asks for a client certificate"):
            client = await connect(server.port, client_context(str(certs.ca_file)))
            await client.get_info("s/none/0")  # TLS 1.3: refused after the handshake
        peer = client_context(str(certs.ca_file), cert_file=tls.cert_file, key_file=tls.key_file)
        await (await connect(server.port, peer)).close()
    finally:
        await server.stop()


async def test_a_certificate_replaced_on_disk_serves_new_connections(
    tls_server: tuple, certs: Certs
) -> None:
    """Open connections keep their session; the next handshake gets the new certificate; a
    half-replaced pair (a new certificate, the old key) is not loaded until the key follows."""
    server, tls = tls_server
    reloader = CertificateReloader(server.tls, tls)
    context = client_context(str(certs.ca_file))
    first = await connect(server.port, context)
    serial = served_serial(first)
    cert, key = certs.issue("node-2")
    Path(tls.cert_file or "").write_bytes(cert.read_bytes())  # the certificate first ...
    assert not reloader.check()  # ... does not load with the old key
    Path(tls.key_file or "").write_bytes(key.read_bytes())
    assert reloader.check() and reloader.reloads == 1
    second = await connect(server.port, context)
    try:
        assert served_serial(second) != serial
        await first.create_segment("s/st/9.#epoch.0")  # the old connection serves on
        assert (await second.get_info("s/st/9.#epoch.0")).write_offset == 0
    finally:
        await first.close()
        await second.close()


def served_serial(client: SegmentStoreClient) -> str:
    """The serial number of the certificate the server presented on this connection."""
    return str(client.connection.transport.get_extra_info("peercert")["serialNumber"])


def test_tls_settings_say_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="set MILLRACE_TLS_CERT_FILE and MILLRACE_TLS_KEY_FILE"):
        TlsSettings.from_env({"MILLRACE_TLS_ENABLED": "1"})
    with pytest.raises(ConfigError, match=r"MILLRACE_TLS_CERT_FILE=.*no such file"):
        TlsSettings.from_env({"MILLRACE_TLS_CERT_FILE": str(tmp_path / "nope.pem")})


async def test_the_metrics_port_serves_https(certs: Certs) -> None:
    from segment_app.server.auth import AllowAll

    tls = tls_of(certs, *certs.issue("node"))
    metrics = MetricsServer(
        "127.0.0.1", 0, TrafficMonitor(60), lambda: {}, AllowAll(), tls=server_context(tls)
    )
    try:
        base = f"127.0.0.1:{metrics.port}"
        async with httpx.AsyncClient(verify=client_context(str(certs.ca_file))) as http:
            answer = await http.get(f"https://{base}/traffic")
            assert answer.status_code == 200 and "segments" in answer.json()
            with pytest.raises(httpx.HTTPError):  # a plaintext request gets no answer
                await http.get(f"http://{base}/traffic")
    finally:
        metrics.close()
    await asyncio.sleep(0)
