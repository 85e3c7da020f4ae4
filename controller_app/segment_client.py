"""The controller's port to the segment store over the wire client (``ports.SegmentStorePort``).

Responsibility: ``WireSegmentStore`` creates, seals, truncates, deletes and merges segments on
whichever node serves them (the host store: ``Node`` and ``ContainerAssignment`` rows, read by
``selectors.node_uri``), with the idempotence a retried workflow step needs: creating a segment
that exists, sealing a sealed one, deleting a missing one, merging a transaction segment that
was merged already all succeed; the wire client's errors become the controller's own
(``SegmentStoreUnavailableError``, ``SegmentTruncatedError``). One blocking connection per node
and process (``SyncSegmentStoreClient``: the async client on a private event loop thread),
opened on first use, so a forked Celery worker never shares a socket with its parent.
Delegation tokens are minted here with the cluster's token secret when authentication is on.
``segment_store()`` is the process's one port, which the Celery tasks and the REST views pass
to the workflows.

``register_node`` is how a segment store node (``millrace standalone``, tests, an operator)
becomes the owner of every container; ``read_traffic`` reads the nodes' traffic monitors for
the auto-scaler.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import httpx
from django.conf import settings

from controller_app import selectors as sel
from controller_app.access.tokens import delegation_token
from controller_app.errors import (
    BadKeyVersionError,
    InvalidArgumentError,
    KeyNotFoundError,
    SegmentStoreUnavailableError,
    SegmentTruncatedError,
)
from controller_app.models import Node
from controller_app.ports import EntryPage, SegmentState, SegmentTraffic, StoredEntry, Traffic
from millrace.client import errors as client_errors
from millrace.client.transport import segment_store as ssc
from millrace.client.transport.sync import SyncSegmentStoreClient
from millrace.kernel.claims import READ, READ_UPDATE, stream_resource
from millrace.kernel.tls import peer_context

T = TypeVar("T")
log = logging.getLogger(__name__)

#: Seconds one request to the segment store may take before it fails.
REQUEST_TIMEOUT_SECONDS = 30.0
#: The wire client's errors that mean "not reachable now" (translated by the port).
_UNREACHABLE = (ssc.ConnectionLostError, ssc.ContainerOfflineError, OSError, TimeoutError)


def _token(segment: str) -> str:
    scope, stream, _ = segment.split("/", 2)
    return delegation_token(stream_resource(scope, stream), READ_UPDATE)


class WireSegmentStore:
    """Blocking segment operations, each routed to the node that serves the segment (a
    ``ports.SegmentStorePort``)."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, int], SyncSegmentStoreClient] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _client(self, segment: str) -> SyncSegmentStoreClient:
        if os.getpid() != self._pid:  # forked: the parent's connections are not ours
            self._clients, self._pid = {}, os.getpid()
        uri = sel.node_uri(segment)
        key = (uri.host, uri.port)
        with self._lock:
            client = self._clients.get(key)
            if client is None or client._client.is_closed:
                client = SyncSegmentStoreClient(
                    uri.host, uri.port, request_timeout=REQUEST_TIMEOUT_SECONDS,
                    ssl=peer_context(settings.MILLRACE_TLS),
                )  # fmt: skip
                self._clients[key] = client
            return client

    def _call(self, segment: str, operation: Callable[[Any], T]) -> T:
        """``operation`` on the client of ``segment``'s node; a node that cannot be reached or
        does not answer is ``SegmentStoreUnavailableError`` (the controller's own error)."""
        try:
            client = self._client(segment)
            try:
                return operation(client)
            except ssc.ConnectionLostError:
                # One retry on a fresh connection (the node restarted); then the error stands.
                with self._lock:
                    self._clients = {k: c for k, c in self._clients.items() if c is not client}
                return operation(self._client(segment))
        except _UNREACHABLE as exc:
            message = f"segment store for {segment}: {type(exc).__name__}: {exc}"
            raise SegmentStoreUnavailableError(message) from exc

    def create_segment(self, segment: str) -> None:
        with contextlib.suppress(ssc.SegmentExistsError):
            self._call(segment, lambda c: c.create_segment(segment, token=_token(segment)))

    def seal(self, segment: str) -> int:
        """Seal ``segment`` (sealed already is fine); its final length."""
        with contextlib.suppress(ssc.SegmentSealedError):
            self._call(segment, lambda c: c.seal(segment, token=_token(segment)))
        return self.info(segment).length

    def truncate(self, segment: str, offset: int) -> None:
        self._call(segment, lambda c: c.truncate(segment, offset, token=_token(segment)))

    def delete(self, segment: str) -> None:
        with contextlib.suppress(ssc.SegmentNotFoundError):
            self._call(segment, lambda c: c.delete(segment, token=_token(segment)))

    def merge(self, target: str, source: str) -> None:
        """Merge transaction segment ``source`` into ``target`` (merged already is fine)."""
        try:
            self._call(target, lambda c: c.merge(target, source, token=_token(target)))
        except ssc.SegmentNotFoundError:
            if not self.info(source).exists and self.info(target).exists:
                return  # merged (and removed) by an earlier run of this step
            raise

    def merge_all(self, merges: Sequence[tuple[str, str]]) -> None:
        """Each ``merge(target, source)``, side by side (``_side_by_side``): one after the
        other, a Spark job's 32 merges took 10-15 ms each (docs/BENCHMARKS.md)."""
        self._side_by_side("merge", list(merges), self.merge)

    def create_all(self, segments: Sequence[str]) -> None:
        """``create_segment`` for each, side by side (a new stream's or a scale's segments, a
        transaction's shadows)."""
        self._side_by_side("create_segment", [(s,) for s in segments], self.create_segment)

    def _side_by_side(
        self, method: str, calls: list[tuple[str, ...]], alone: Callable[..., Any]
    ) -> None:
        """``method`` once per argument tuple (the segment first), sent to each segment's node
        all at once, so that the node's tier-1 writes for them share their syncs. A call that
        fails that way, or whose node could not be reached, is made again alone (``alone``,
        with its error handling: created or merged already is fine)."""
        by_node: dict[int, tuple[SyncSegmentStoreClient, list[tuple[str, ...]]]] = {}
        again: list[tuple[str, ...]] = []
        for args in calls:
            try:
                client = self._client(args[0])
            except Exception:  # ``alone`` reports it
                again.append(args)
                continue
            by_node.setdefault(id(client), (client, []))[1].append(args)
        for client, group in by_node.values():
            try:
                outcomes = client.all_at_once(method, [(a, _token(a[0])) for a in group])
            except Exception:  # as above
                again += group
                continue
            again += [args for args, error in zip(group, outcomes, strict=True) if error]
        for args in again:
            alone(*args)

    def create_table(self, segment: str) -> None:
        with contextlib.suppress(ssc.SegmentExistsError):
            self._call(segment, lambda c: c.table("create", segment, token=_token(segment)))

    def delete_table(self, segment: str) -> None:
        with contextlib.suppress(ssc.SegmentNotFoundError):
            self._call(
                segment,
                lambda c: c.table("delete", segment, must_be_empty=False, token=_token(segment)),
            )

    def table_get(self, segment: str, key: bytes) -> StoredEntry | None:
        found = self._table(segment, "get", [key])[0]
        return None if found is None else StoredEntry(found.key, found.value, found.version)

    def table_put(self, segment: str, key: bytes, value: bytes, version: int) -> int:
        return int(self._table(segment, "update", [(key, value, version)])[0])

    def table_remove(self, segment: str, key: bytes, version: int) -> None:
        self._table(segment, "remove", [(key, version)])

    def table_page(self, segment: str, limit: int, token: bytes, prefix: bytes) -> EntryPage:
        page = self._table(segment, "entries", limit, token, prefix=prefix)
        entries = [StoredEntry(e.key, e.value, e.version) for e in page.entries]
        return EntryPage(entries, page.token)

    def table_counts(self, segment: str) -> tuple[int, int, int]:
        start, length, count = self._table(segment, "info")
        return int(start), int(length), int(count)

    def _table(self, segment: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """A table-segment call on ``segment`` (``TableCalls.<method>``) with a token that may
        change it; the segment's refusals as the controller's errors."""
        token = _token(segment)
        try:
            return self._call(
                segment, lambda c: c.table(method, segment, *args, token=token, **kwargs)
            )
        except client_errors.TableKeyBadVersionError as exc:
            raise BadKeyVersionError(str(exc)) from None
        except client_errors.TableKeyDoesNotExistError as exc:
            raise KeyNotFoundError(str(exc)) from None
        except client_errors.InvalidArgumentError as exc:
            raise InvalidArgumentError(str(exc)) from None

    def read(self, segment: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of ``segment`` at ``offset`` (below its length: a read at
        the tail would wait for data)."""
        try:
            got = self._call(
                segment, lambda c: c.read_segment(segment, offset, length, token=_token(segment))
            )
        except ssc.SegmentTruncatedError as exc:
            raise SegmentTruncatedError(str(exc)) from exc
        return bytes(got.data)

    def locate(self, segment: str, target: int) -> int:
        try:
            found: int = self._call(
                segment, lambda c: c.locate_offset(segment, target, token=_token(segment))
            )
            return found
        except ssc.SegmentTruncatedError as exc:
            raise SegmentTruncatedError(str(exc)) from exc

    def info(self, segment: str) -> SegmentState:
        try:
            got = self._call(segment, lambda c: c.get_info(segment, token=_token(segment)))
        except ssc.SegmentNotFoundError:
            return SegmentState(False, False, 0, 0)
        exists = got.exists and not got.deleted
        return SegmentState(
            exists, got.sealed, got.write_offset, got.start_offset, got.last_modified_ms
        )

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


_port: WireSegmentStore | None = None
_port_lock = threading.Lock()


def segment_store() -> WireSegmentStore:
    """The process's port to the segment store (the edges pass it to the workflows)."""
    global _port
    with _port_lock:
        if _port is None:
            _port = WireSegmentStore()
        return _port


#: Seconds the auto-scaler waits for a node's traffic monitor.
TRAFFIC_TIMEOUT_SECONDS = 2.0


def _metrics_url(node: Node, path: str) -> str:
    """``path`` on the node's metrics port (``https://`` when the node needs TLS)."""
    return f"{'https' if node.tls else 'http'}://{node.host}:{node.metrics_port}{path}"


def _metrics_get(url: str) -> httpx.Response:
    """``GET url`` with a delegation token for everything (``httpx.HTTPError`` if it fails)."""
    headers = {"Authorization": f"Bearer {delegation_token('*', READ)}"}
    verify = peer_context(settings.MILLRACE_TLS) or True
    return httpx.get(url, headers=headers, timeout=TRAFFIC_TIMEOUT_SECONDS, verify=verify)


def read_traffic() -> Traffic:
    """What the traffic monitors of the registered nodes say (``GET /traffic`` on each one's
    metrics port). A node that does not answer counts as just started: its segments are
    neither hot nor cold this round."""
    segments: dict[str, SegmentTraffic] = {}
    uptime = math.inf
    for node in sel.segment_store_nodes().exclude(metrics_port=None):
        url = _metrics_url(node, "/traffic")
        try:
            found = _metrics_get(url).raise_for_status().json()
            entries = {
                e["segment"]: SegmentTraffic(
                    float(e["eventsPerSecond"]),
                    float(e["bytesPerSecond"]),
                    float(e["seenForSeconds"]),
                    int(e.get("events", 0)),
                    int(e.get("bytes", 0)),
                )
                for e in found["segments"]
            }
            node_uptime = float(found["uptimeSeconds"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.warning("no traffic from node %s (%s): %s", node.node_id, url, exc)
            entries, node_uptime = {}, 0.0
        segments.update(entries)
        uptime = min(uptime, node_uptime)
    return Traffic(segments, 0.0 if uptime == math.inf else uptime)


#: The node metrics the console's dashboard sums: Prometheus sample name -> its key.
NODE_SAMPLES = {
    "millrace_segment_events_total": "events",
    "millrace_segment_bytes_total": "bytes",
    "millrace_container_tier2_lag_bytes": "tier2_lag_bytes",
    "millrace_container_tier1_backlog_operations": "tier1_backlog_operations",
    "millrace_container_cache_bytes": "cache_bytes",
    "millrace_container_disk_cache_bytes": "disk_cache_bytes",
    "millrace_container_running": "containers_running",
}


def read_node_metrics() -> dict[str, dict[str, float] | None]:
    """Per registered node (``node_id``), the sums of ``NODE_SAMPLES`` from its metrics port's
    ``/metrics``; ``None`` for a node that does not answer (or has no metrics port)."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, dict[str, float] | None] = {}
    for node in sel.segment_store_nodes().order_by("node_id"):
        if node.metrics_port is None:
            found[node.node_id] = None
            continue
        url = _metrics_url(node, "/metrics")
        try:
            sums = dict.fromkeys(NODE_SAMPLES.values(), 0.0)
            for family in text_string_to_metric_families(_metrics_get(url).raise_for_status().text):
                for sample in family.samples:
                    key = NODE_SAMPLES.get(sample.name)
                    if key is not None:
                        sums[key] += sample.value
            found[node.node_id] = sums
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("no metrics from node %s (%s): %s", node.node_id, url, exc)
            found[node.node_id] = None
    return found
