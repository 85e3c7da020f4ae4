"""TLS for every port and every connection: the contexts, their rotation, and plain refusals.

Responsibility: build the ``ssl.SSLContext`` a server listens with (``server_context``) and the
one a client connects with (``client_context``); keep a server's certificate current when its
files are replaced on disk (``CertificateReloader``: new handshakes get the new certificate,
open connections keep theirs); and turn what ``ssl`` raises into one sentence that says what is
wrong (``explain``): a plaintext peer on a TLS port, a TLS peer on a plaintext port, an unknown
CA, an expired certificate, a certificate for another host.

Part of the Django-free kernel: the segment store node, the controller, the Python client and
the command line all use it. Nothing here reads the environment (``TlsSettings`` does).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import ssl
import threading
from collections.abc import Callable
from typing import Literal

from millrace.kernel.config import TlsSettings

__all__ = [
    "CertificateReloader",
    "TlsRefused",
    "client_context",
    "explain",
    "peer_context",
    "probe_peer",
    "refusal",
    "server_context",
]

log = logging.getLogger(__name__)

#: OpenSSL's verification codes (``SSLCertVerificationError.verify_code``) people meet.
_EXPIRED, _NOT_YET_VALID = 10, 9
_UNKNOWN_ISSUER = frozenset({2, 18, 19, 20, 21})
_HOST_MISMATCH = frozenset({62, 64})


class TlsRefused(Exception):
    """A connection failed because of TLS; the message says why (see ``refusal``). Not worth
    retrying (so not an ``OSError``): the configuration, not the network, is wrong."""


def server_context(tls: TlsSettings) -> ssl.SSLContext:
    """The context of a listening port: this process's certificate, TLS 1.2 or later, and
    with ``client_auth`` a required client certificate signed by the CA."""
    assert tls.cert_file and tls.key_file, "TlsSettings checks this"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.client_auth:
        assert tls.ca_file, "TlsSettings checks this"
        context.load_verify_locations(cafile=tls.ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@functools.cache
def client_context(
    ca_file: str | None = None,
    *,
    verify_hostname: bool = True,
    cert_file: str | None = None,
    key_file: str | None = None,
) -> ssl.SSLContext:
    """A client's context: trusts ``ca_file`` (default the system's trust store), checks the
    peer's host name unless told not to, presents ``cert_file`` when given (mutual TLS). Made
    once per distinct set of arguments (loading a CA bundle takes milliseconds)."""
    context = ssl.create_default_context(cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = verify_hostname
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
    return context


def peer_context(tls: TlsSettings) -> ssl.SSLContext | None:
    """The context a node's process (controller, worker, supervisor) calls the other nodes
    with: ``None`` when TLS is off; with ``client_auth``, presenting its own certificate."""
    if not tls.enabled:
        return None
    mutual = tls.client_auth
    return client_context(
        tls.ca_file,
        verify_hostname=tls.verify_hostname,
        cert_file=tls.cert_file if mutual else None,
        key_file=tls.key_file if mutual else None,
    )


def explain(exc: BaseException, where: str) -> str | None:
    """What went wrong in the TLS handshake with ``where``, in one sentence; ``None`` when
    ``exc`` says nothing definite about TLS (a peer that closed the connection: ask
    ``probe_peer``)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        if code in (_EXPIRED, _NOT_YET_VALID):
            when = "has expired" if code == _EXPIRED else "is not valid yet"
            return f"{where}: its TLS certificate {when} ({exc.verify_message})"
        if code in _HOST_MISMATCH:
            return (
                f"{where}: its TLS certificate is for another host name ({exc.verify_message}); "
                "connect by a name the certificate lists"
            )
        if code in _UNKNOWN_ISSUER:
            return (
                f"{where}: its TLS certificate is signed by an unknown CA "
                f"({exc.verify_message}); give the CA file (tls_ca, --ca or MILLRACE_TLS_CA_FILE)"
            )
        return f"{where}: its TLS certificate was refused ({exc.verify_message})"
    if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return None
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or str(exc)
        if reason in ("WRONG_VERSION_NUMBER", "UNEXPECTED_MESSAGE", "RECORD_LAYER_FAILURE"):
            return PLAINTEXT_PORT.format(where=where)
        if "CERTIFICATE" in reason:
            return CLIENT_CERT.format(where=where) + f" ({reason})"
        return f"{where}: TLS failed ({reason})"
    return None


#: A TLS client met a plaintext port.
PLAINTEXT_PORT = "{where} does not speak TLS (a plaintext port): connect without TLS"
#: A plaintext client met a TLS port.
TLS_PORT = "{where} serves TLS and this client connects in plaintext: {fix}"
#: A TLS peer that wants a client certificate (mutual TLS) and was given none.
CLIENT_CERT = "{where} asks for a client certificate (mutual TLS) and refused ours"
#: What a peer that closed the connection during the handshake raises.
_CLOSED = (EOFError, ConnectionResetError, ConnectionAbortedError, ssl.SSLError)

Peer = Literal["down", "plaintext", "tls", "client-cert"]


async def probe_peer(host: str, port: int, timeout: float = 2.0) -> Peer:
    """What answers at ``host:port``: nothing (``down``), a plaintext port, a TLS port, or a TLS
    port that wants a client certificate (its certificate unchecked; none presented). Asked
    when a peer closed a connection during the handshake, to say which side is wrong."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        sock = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError):
        return "down"
    reader, writer = sock
    try:
        await asyncio.wait_for(writer.start_tls(context, server_hostname=host), timeout)
    except (OSError, TimeoutError):
        writer.close()
        return "plaintext"
    try:  # TLS 1.3 refuses a missing client certificate after the handshake: the peer drops
        # a connection that has sent nothing (an alert, a reset or an end), where a TLS port
        # that has what it wants waits for the request
        await asyncio.wait_for(reader.read(1), 0.5)
    except TimeoutError:
        return "tls"
    except OSError:
        pass
    finally:
        writer.close()
    return "client-cert"


async def refusal(
    exc: BaseException,
    host: str,
    port: int,
    where: str,
    *,
    tls: bool,
    fix: str,
    closed: bool = False,
) -> str | None:
    """Why a connection to ``host:port`` (``where``) failed, when TLS is the cause: ``exc``
    explained, or, when the peer closed the connection during the handshake (``exc`` says so,
    or ``closed``), what a probe of the peer finds. ``None``: not TLS (e.g. the peer is down or
    restarting; worth retrying)."""
    reason = explain(exc, where)
    if reason is not None:
        return reason
    if not (closed or isinstance(exc, _CLOSED)):
        return None
    peer = await probe_peer(host, port)
    if tls and peer == "plaintext":
        return PLAINTEXT_PORT.format(where=where)
    if tls and peer == "client-cert":
        return CLIENT_CERT.format(where=where)
    if not tls and peer in ("tls", "client-cert"):
        return TLS_PORT.format(where=where, fix=fix)
    return None


class CertificateReloader:
    """Keeps a server on the certificate and key files of ``tls``: every ``reload_s`` seconds
    (a daemon thread) it compares their modification times and sizes and, when they changed and
    the new pair loads, makes a fresh context of them (``make``; default ``server_context``).
    The live ``context`` the server listens with is never changed: its SNI callback, which runs
    in each handshake's own thread, hands the handshake to the freshest context, so no thread
    touches a context another is handshaking with. New connections get the new certificate;
    open ones keep theirs. A pair that does not load yet (one file replaced, the other not) is
    tried again at the next check; the old one serves meanwhile."""

    def __init__(
        self,
        context: ssl.SSLContext,
        tls: TlsSettings,
        *,
        make: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        self.context = context
        self.tls = tls
        self.make = make or (lambda: server_context(tls))
        #: The context new handshakes get (the live one until a reload).
        self.current = context
        self.reloads = 0
        self._seen = self._stamp()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        context.sni_callback = self._choose

    def _choose(self, connection: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        current = self.current
        if current is not context:
            connection.context = current

    def _stamp(self) -> tuple[tuple[int, int], ...]:
        stamps = []
        for path in (self.tls.cert_file, self.tls.key_file):
            try:
                info = os.stat(path or "")
                stamps.append((info.st_mtime_ns, info.st_size))
            except OSError:
                stamps.append((0, 0))
        return tuple(stamps)

    def check(self) -> bool:
        """Make a fresh context if the files changed and now form a pair; whether it did."""
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        try:
            fresh = self.make()
        except (OSError, ssl.SSLError) as exc:
            log.warning("TLS certificate files changed but do not load yet: %s", exc)
            return False
        self.current, self._seen = fresh, stamp
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self.tls.cert_file)
        return True

    def start(self) -> CertificateReloader:
        self._thread = threading.Thread(target=self._run, name="millrace-tls-reload", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.tls.reload_s):
            self.check()

    def stop(self) -> None:
        self._stop.set()
