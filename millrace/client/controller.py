"""The client's side of the controller: its REST API, over httpx (asyncio).

What writers and readers need from the controller: scopes and streams, the current segments,
a segment's successors, where a segment is served, and delegation tokens for the segment
store. Errors come back as ``ControllerError`` with the API's stable ``code``.

TLS: an ``https://`` (or ``tls://``, Pravega's spelling) URL means TLS to the controller and to
every segment store node, verified against ``tls_ca`` (default: the system's trust store) and,
unless ``validate_hostname`` is off, the host names. A node advertises whether it needs TLS; a
client whose choice differs fails at once with ``TlsRefused`` saying so, as it does for an
unknown CA, an expired certificate or another host's certificate.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from typing import Any

import httpx

from millrace.client.routing import SegmentWithRange
from millrace.kernel import rest_paths as paths
from millrace.kernel import traces
from millrace.kernel.naming import parent_name, parse_segment_name
from millrace.kernel.tls import TLS_PORT, TlsRefused, client_context, refusal

#: How long a read follows a segment whose node is away (asking ``segment_node`` again)
#: before it fails: a failover takes the session timeout, a renewal and the recovery.
FOLLOW_SECONDS = 60.0

#: Seconds one REST call may take (a scale or seal waits for the controller's worker).
REQUEST_TIMEOUT_SECONDS = 60.0
#: How long a call keeps trying while the controller is away (connection refused: restarting)
#: or answers 503 (the segment store is away), before the error reaches the caller.
PATIENCE_SECONDS = 60.0
#: Delay before the first retry; it doubles up to the max (or what ``Retry-After`` says).
RETRY_DELAY_SECONDS, RETRY_DELAY_MAX_SECONDS = 0.1, 2.0
#: Seconds a connection to a controller may take: one partitioned or paused answers no SYN
#: (or never reads), and the client moves to the next controller after this.
CONNECT_TIMEOUT_SECONDS = 3.0
#: Answers after which the client tries again, on the next controller if it has several:
#: 503 (the controller, or a service it needs, is away: nothing was changed), and a proxy's
#: 502 and 504 for a call that changes nothing.
_MOVE_ON = frozenset({502, 503, 504})


class ControllerError(Exception):
    """An error answer of the controller: HTTP ``status``, stable ``code``, ``message``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def _retry_after(response: httpx.Response, delay: float) -> float:
    try:
        return min(max(float(response.headers.get("Retry-After", delay)), 0.0), PATIENCE_SECONDS)
    except ValueError:
        return delay


@functools.cache
def _plain() -> ssl.SSLContext:
    """The context httpx is given for ``http://`` URLs, made once: httpx makes one per client
    (loading the CA bundle, tens of milliseconds) even for ``http://``, and a Spark task
    makes a client per task."""
    return httpx.create_ssl_context()


def http_url(uri: str) -> str:
    """``uri`` as an HTTP URL: ``tls://`` (Pravega's spelling) is ``https://``; a URL with
    another scheme is refused."""
    if uri.startswith("tls://"):
        return "https://" + uri.removeprefix("tls://")
    if not uri.startswith(("http://", "https://")):
        raise ValueError(f"{uri!r}: give the controller's URL, http://host:9091 or https://...")
    return uri


def controller_urls(uri: str) -> list[str]:
    """The controllers of ``uri``: one URL, or several separated by commas as Pravega's
    clients take them (``http://a:9091,b:9091``: an address without a scheme takes the first
    one's). Each as an HTTP URL without a trailing ``/``; all of one scheme (TLS or not)."""
    parts = [part.strip() for part in uri.split(",")]
    if not parts[0] or any(not part for part in parts):
        raise ValueError(f"{uri!r}: an empty controller address (give http://host:9091,...)")
    first = http_url(parts[0])
    scheme = first.split("://", 1)[0]
    urls = [first] + [http_url(p if "://" in p else f"{scheme}://{p}") for p in parts[1:]]
    if len({url.split("://", 1)[0] for url in urls}) > 1:
        raise ValueError(f"{uri!r}: the controllers must all use TLS or none")
    return [url.rstrip("/") for url in urls]


class AsyncControllerClient:
    """REST calls to a controller (``http://host:9091``, ``https://`` for TLS), authenticated
    by an API token. Given several (``http://a:9091,b:9091``), it calls one and moves to the
    next when that one is away, silent or answers 502-504."""

    def __init__(
        self,
        uri: str,
        token: str = "",
        *,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        user_agent: str | None = None,
        tls_ca: str | None = None,
        validate_hostname: bool = True,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ):
        #: The controllers' base URLs, and which one is called now.
        self.urls = controller_urls(uri)
        self._current = 0
        headers = {"Authorization": f"Token {token}"} if token else {}
        if user_agent is not None:
            headers["User-Agent"] = user_agent
        #: TLS to the controller and the segment store nodes (None: plaintext).
        self.tls: ssl.SSLContext | None = None
        if self.urls[0].startswith("https://"):
            self.tls = client_context(
                tls_ca, verify_hostname=validate_hostname, cert_file=tls_cert, key_file=tls_key
            )
        self._http = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_SECONDS),
            verify=self.tls or _plain(),
        )  # fmt: skip

    @property
    def url(self) -> httpx.URL:
        """The controller called now."""
        return httpx.URL(self.urls[self._current])

    async def close(self) -> None:
        await self._http.aclose()

    async def call(
        self, method: str, path: str, body: Any = None, *, changes: bool | None = None,
        headers: dict[str, str] | None = None, api: str = "/v1",
    ) -> Any:  # fmt: skip
        """One REST call; rides through a controller restart and a 503 for ``PATIENCE_SECONDS``,
        moving to the next controller (if it was given several) after each failed try. ``api``:
        the API's path (``/registry``: the schema registry's; its errors' codes are numbers).

        A call whose connection was never made is retried whatever its method; one cut after it
        was sent only if it changes nothing (``changes``: default, whether it is not a
        ``GET``), since a change may have been made."""
        loop = asyncio.get_running_loop()
        delay, deadline = RETRY_DELAY_SECONDS, loop.time() + PATIENCE_SECONDS
        tried = 0  # controllers tried since the last pause
        while True:
            url = f"{self.urls[self._current]}{api}{path}"
            try:
                with traces.span(f"{method}", "client", **{"http.request.method": method,
                                                            "url.full": url}):  # fmt: skip
                    sent = traces.inject(headers)
                    response = await self._http.request(method, url, json=body, headers=sent)
            except httpx.TransportError as exc:
                await self._tls_refusal(exc)
                unsent = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))
                safe = method == "GET" if changes is None else not changes
                if not (unsent or safe) or loop.time() + delay > deadline:
                    raise
            else:
                status = response.status_code
                safe = method == "GET" if changes is None else not changes
                again = status == 503 or (status in _MOVE_ON and safe)
                if not again or loop.time() + delay > deadline:
                    break
                if response.status_code == 503:
                    delay = _retry_after(response, delay)
            self._current = (self._current + 1) % len(self.urls)
            tried += 1
            if tried < len(self.urls):
                continue  # the next controller at once
            tried = 0
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_DELAY_MAX_SECONDS)
        if response.status_code >= 400:
            try:
                error = response.json()
                code, message = str(error.get("code", error.get("error_code"))), error["message"]
            except (ValueError, KeyError, TypeError, AttributeError):
                code, message = "http-error", response.text[:200]
            raise ControllerError(response.status_code, code, message)
        return response.json() if response.content else None

    async def _tls_refusal(self, exc: httpx.TransportError) -> None:
        """Raise ``TlsRefused`` when TLS is why ``exc`` happened (it is not worth a retry)."""
        where = f"the controller at {self.url}"
        reason = await http_tls_refusal(exc, self.url, where, tls=self.tls is not None)
        if reason is not None:
            raise TlsRefused(reason) from None

    # -- scopes and streams ----------------------------------------------------------------

    async def create(self, path: str, body: dict[str, Any]) -> bool:
        """``POST path body``: ``True`` once made, ``False`` if it existed already."""
        try:
            await self.call("POST", path, body)
        except ControllerError as exc:
            if exc.code == "already-exists":
                return False
            raise
        return True

    async def create_scope(self, scope: str) -> bool:
        """Create ``scope``; ``False`` if it existed already."""
        return await self.create(paths.scopes(), {"scopeName": scope})

    async def delete_scope(self, scope: str) -> None:
        await self.call("DELETE", paths.scope(scope))

    async def create_stream(
        self,
        scope: str,
        stream: str,
        initial_segments: int = 1,
        *,
        scaling_policy: dict[str, Any] | None = None,
        retention_policy: dict[str, Any] | None = None,
    ) -> bool:
        """Create ``scope/stream`` with a fixed number of segments, or with the REST API's
        ``scalingPolicy`` / ``retentionPolicy``; ``False`` if it existed."""
        body: dict[str, Any] = {
            "streamName": stream,
            "scalingPolicy": scaling_policy
            or {"type": "FIXED_NUM_SEGMENTS", "minSegments": initial_segments},
        }
        if retention_policy is not None:
            body["retentionPolicy"] = retention_policy
        return await self.create(paths.streams(scope), body)

    async def list_streams(self, scope: str) -> list[str]:
        """The names of the scope's streams (internal ones, starting with ``_``, left out)."""
        found = await self.call("GET", paths.streams(scope))
        return [str(item["streamName"]) for item in found["streams"]]

    async def seal_stream(self, scope: str, stream: str) -> None:
        await self.call("PUT", paths.stream_state(scope, stream), {"streamState": "SEALED"})

    async def delete_stream(self, scope: str, stream: str) -> None:
        await self.call("DELETE", paths.stream(scope, stream))

    # -- segments --------------------------------------------------------------------------

    async def current_segments(self, scope: str, stream: str) -> list[SegmentWithRange]:
        found = await self.call("GET", paths.segments(scope, stream))
        return [_segment(item) for item in found["segments"]]

    async def successors(
        self, scope: str, stream: str, segment_id: int
    ) -> list[tuple[SegmentWithRange, list[int]]]:
        path = paths.segment_successors(scope, stream, segment_id)
        found = await self.call("GET", path)
        return [(_segment(item), list(item["predecessors"])) for item in found["successors"]]

    async def segment_uri(self, scope: str, stream: str, segment_id: int) -> tuple[str, int]:
        """The node serving the segment (Pravega's getURI); ``TlsRefused`` when the node needs
        TLS and this client is plaintext, or the other way round."""
        found = await self.call("GET", paths.segment_uri(scope, stream, segment_id))
        host, port = str(found["host"]), int(found["port"])
        if bool(found.get("tls")) != (self.tls is not None):
            where = f"segment store {host}:{port}"
            if self.tls is None:
                raise TlsRefused(TLS_PORT.format(where=where, fix="use an https:// URL"))
            raise TlsRefused(f"{where} does not serve TLS (it advertises a plaintext port)")
        return host, port

    async def segment_node(self, name: str) -> tuple[str, int]:
        """The node serving the segment of qualified name ``name`` now (after a WrongHost or a
        lost connection: its container may have moved to another node)."""
        scope, stream, segment_id = parse_segment_name(parent_name(name))
        return await self.segment_uri(scope, stream, segment_id)

    # -- writer marks and watermarks ---------------------------------------------------------

    async def stream_config(self, scope: str, stream: str) -> dict[str, Any]:
        """The stream's configuration as REST shows it (``GET .../streams/{stream}``)."""
        found: dict[str, Any] = await self.call("GET", paths.stream(scope, stream))
        return found

    async def note_writer_mark(
        self, scope: str, stream: str, writer_id: str, timestamp: int, position: dict[int, int]
    ) -> None:
        body = {
            "writerId": writer_id,
            "timestamp": timestamp,
            "position": {str(k): v for k, v in position.items()},
        }
        await self.call("POST", paths.writer_marks(scope, stream), body)

    async def watermark(self, scope: str, stream: str) -> dict[str, Any] | None:
        """The stream's newest watermark (REST's ``Watermark``), ``None`` while it has none."""
        try:
            found: dict[str, Any] = await self.call("GET", paths.watermark(scope, stream))
        except ControllerError as exc:
            if exc.code == "no-watermark":
                return None
            raise
        return found

    async def delegation_token(self, scope: str, stream: str) -> str:
        path = paths.stream_token(scope, stream)
        found = await self.call("POST", path, changes=False)  # (a new token: safe to ask again)
        return str(found["token"])


def _segment(item: dict[str, Any]) -> SegmentWithRange:
    return SegmentWithRange(
        int(item["segmentId"]), str(item["name"]), float(item["keyStart"]), float(item["keyEnd"])
    )


async def http_tls_refusal(
    exc: BaseException, url: httpx.URL, where: str, *, tls: bool
) -> str | None:
    """Why an HTTP call to ``url`` (``where``) failed with ``exc`` when TLS is the cause, said
    as every part of Millrace says it (``millrace.kernel.tls.refusal``); ``None`` otherwise."""
    if not isinstance(exc, httpx.ConnectError | httpx.RemoteProtocolError | httpx.ReadError):
        return None
    cause: BaseException = exc
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
    port = url.port or (443 if url.scheme == "https" else 80)
    return await refusal(
        cause, url.host, port, where, tls=tls, fix="use an https:// URL",
        closed=isinstance(exc, httpx.RemoteProtocolError),
    )  # fmt: skip
