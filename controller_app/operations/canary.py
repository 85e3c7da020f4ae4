"""The canary: every ``MILLRACE_CANARY_PERIOD_S`` a worker writes one small event to each
segment of the internal stream ``_system/canary`` and reads it back, as a user would, so that
a node that takes no appends or serves no reads is seen before a user's writer meets it.

Responsibility: one canary round (the beat job ``millrace.canary``). The stream has one segment
per container of the cluster, twice over (at most ``SEGMENTS_MAX``), so every node owns some
of them (with 2 segments per container and uniform placement, a node of 4 containers among
12 owns none about once in 17,000 layouts: then it is not probed, and has no row).
Per segment the round:

1. notes the segment's length (the wire protocol's segment info);
2. writes one event with a routing key that lands in it, through the client's writer, as the
   REST API appends (``controller_app.event_writers.WRITERS``), and waits for its
   acknowledgement (``ack_seconds``);
3. reads the segment from that length and finds the event (``read_seconds``: from the write
   to the read's answer, end to end).

Each node's newest figures, its successes and failures and its last error are kept in its
``CanaryProbe`` row, where the controller's ``/metrics`` reads them. A round that cannot start
(the database is away) leaves the rows as they are: the age of the last success grows.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import defaultdict
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from controller_app import selectors as sel
from controller_app.errors import AlreadyExistsError, ScopeNotFoundError
from controller_app.event_writers import WRITERS
from controller_app.models import CanaryProbe, Container, Node, Stream
from controller_app.ports import SegmentStorePort
from controller_app.segments import Segment
from controller_app.workflows import scopes, streams
from controller_app.workflows.config import StreamConfig
from millrace.client.routing import key_point

log = logging.getLogger(__name__)

SCOPE, STREAM = "_system", "canary"
#: The canary stream's segments, at most.
SEGMENTS_MAX = 64
#: Bytes of history the canary stream keeps (retention by size).
KEEP_BYTES = 1 << 20


def canary_stream(store: SegmentStorePort) -> Stream:
    """``_system/canary``, made on first use."""
    found = Stream.objects.select_related("scope").filter(scope__name=SCOPE, name=STREAM).first()
    if found is not None:
        return found
    try:
        scopes.get_scope(SCOPE)
    except ScopeNotFoundError:
        with contextlib.suppress(AlreadyExistsError):  # (another round made it)
            scopes.create_scope(SCOPE)
    segments = min(SEGMENTS_MAX, max(1, 2 * Container.objects.count()))
    config = StreamConfig(min_segments=segments, retention_type="SIZE", retention_value=KEEP_BYTES)
    return streams.create_stream(store, SCOPE, STREAM, config)


def key_for(segment: Segment) -> str:
    """A routing key the client's writer sends to ``segment``."""
    for n in range(100_000):
        if segment.key_start <= key_point(f"canary-{n}") < segment.key_end:
            return f"canary-{n}"
    raise ValueError(f"no canary key falls in [{segment.key_start}, {segment.key_end})")


def _node_names() -> dict[tuple[str, int], str]:
    return {(host, port): node_id for node_id, host, port in Node.objects.values_list(
        "node_id", "host", "port")}  # fmt: skip


def probe_segment(store: SegmentStorePort, stream: Stream, segment: Segment) -> tuple[float, float]:
    """Write one event to ``segment`` and read it back: (ack, read) seconds."""
    name = sel.segment_name(stream, segment.id)
    before = store.info(name).length
    payload = f"canary {uuid.uuid4().hex} {time.time():.3f}".encode()
    started = time.monotonic()
    WRITERS.append(SCOPE, STREAM, [(payload, key_for(segment))])
    acked = time.monotonic() - started
    deadline = started + 10
    while True:
        found = store.read(name, before, 64 * 1024)
        if payload in found:
            return acked, time.monotonic() - started
        if time.monotonic() > deadline:
            raise TimeoutError(f"the canary event was acknowledged but not read back from {name}")
        time.sleep(0.01)


def canary_round(store: SegmentStorePort) -> dict[str, str]:
    """Probe every segment of the canary stream; each node's outcome ("ok" or the error)."""
    stream = canary_stream(store)
    names = _node_names()
    outcomes: dict[str, list[tuple[float, float] | str]] = defaultdict(list)
    for segment in sel.current_segments(stream):
        uri = sel.segment_uri(stream, segment.id)
        node = names.get((uri.host, uri.port), f"{uri.host}:{uri.port}")
        try:
            outcomes[node].append(probe_segment(store, stream, segment))
        except Exception as exc:
            log.warning("canary: %s failed: %s: %s", node, type(exc).__name__, exc)
            outcomes[node].append(f"{type(exc).__name__}: {exc}")
    return {node: _record(node, found) for node, found in outcomes.items()}


def _record(node: str, found: list[tuple[float, float] | str]) -> str:
    """Keep one node's outcome of this round; "ok" or its first error."""
    errors = [each for each in found if isinstance(each, str)]
    timings = [each for each in found if not isinstance(each, str)]
    now = timezone.now()
    changes: dict[str, Any] = {"probed_at": now}
    if errors:
        changes.update(failures=F("failures") + 1, last_error=errors[0][:2000])
    else:
        changes.update(
            successes=F("successes") + 1, succeeded_at=now,
            ack_seconds=max(t[0] for t in timings), read_seconds=max(t[1] for t in timings),
        )  # fmt: skip
    with transaction.atomic():
        CanaryProbe.objects.get_or_create(node=node, defaults={"probed_at": now})
        CanaryProbe.objects.filter(node=node).update(**changes)
    return errors[0] if errors else "ok"
