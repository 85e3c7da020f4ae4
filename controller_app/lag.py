"""Reader-group lag, measured and judged by the controller.

Pravega never measured a consumer's lag on the server. Kafka users run Burrow,
kafka-lag-exporter or kminion beside their brokers for it. Here a beat job, the lag round
(every ``MILLRACE_LAG_PERIOD_S``, 10 s by default), measures every reader group and keeps the
result in its ``ReaderGroupLag`` row. REST, the CLI, the console and the metrics all read that
row. Per reader (and for the segments no reader holds), and summed for the group:

* **bytes**: each segment's length now less the group's position in it. A position is a
  reader's last reported one, or where an unassigned segment starts; a successor still
  waiting in ``future`` counts whole.
* **events**: the bytes divided by the segment's mean event size: the bytes over the events
  its segment store took since it started (its traffic monitor's totals, headers counted on
  both sides). It is null where a lagging segment took no event since then, since its event
  size is not known. Exact for events of one size.
* **seconds**: how long ago the oldest unread event was appended. This is when the segment's
  length passed the position, interpolated between the lengths the rounds saw (one point a
  round, an hour of them, as kafka-lag-exporter does). It is 0 when nothing is unread, and at
  least the age of the oldest point when the position is older than that.

**Status**, without thresholds, as Burrow judges a consumer, over the last ``WINDOW`` rounds
(at least ``WINDOW_MIN`` of them):

* ``ERR``: the last round could not measure the group (a segment store did not answer);
* ``STOP``: no reader online (none has synced within the group's reader timeout);
* ``OK``: nothing unread in some round of the window;
* ``STALL``: the group's positions did not move in the whole window, with data unread;
* ``WARN``: the lag grew from round to round through the whole window;
* ``OK`` again otherwise: reading, keeping up or catching up.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import Any

from django.conf import settings
from django.db import transaction

from controller_app import selectors as sel
from controller_app.models import ReaderGroup, ReaderGroupLag
from controller_app.ports import SegmentStorePort, SegmentTraffic, Traffic
from controller_app.reader_group_state import GroupState, split_key
from millrace.kernel import defaults

__all__ = ["STATUSES", "WINDOW", "age_ms", "judge", "lag_of", "lag_round", "measure"]

log = logging.getLogger(__name__)

STATUSES = ("OK", "WARN", "STALL", "STOP", "ERR")
#: The rounds a status is judged over, and the fewest it needs to call WARN or STALL.
WINDOW = 10
WINDOW_MIN = 5
#: How long a segment's lengths are kept for the seconds of lag.
TAILS_KEPT_MS = 3_600_000
#: The lease a round holds while it runs (``ClusterLease``).
LEASE = "lag-round"

#: A segment key -> its length now (None: not known this round, with why in ``errors``).
Lengths = Callable[[str], int | None]


def now_ms() -> int:
    return int(time.time() * 1000)


# -- the parts, pure ------------------------------------------------------------------------------


def age_ms(points: list[list[int]], position: int, at_ms: int) -> int:
    """How long before ``at_ms`` the segment's length passed ``position`` (the oldest unread
    byte's append time), interpolated between the ``[ms, length]`` points."""
    if not points or position >= points[-1][1]:
        return 0
    for index, (when, length) in enumerate(points):
        if length > position:
            if index == 0:
                return max(at_ms - when, 0)  # (older than what is kept: at least this old)
            before, shorter = points[index - 1]
            appended = before + (position - shorter) / (length - shorter) * (when - before)
            return max(int(at_ms - appended), 0)
    return 0


def add_point(points: list[list[int]], at_ms: int, length: int) -> list[list[int]]:
    """The segment's points with this round's: a run of rounds at one length keeps its first
    and last point only, and points older than ``TAILS_KEPT_MS`` go (one stays)."""
    out = [p for p in points if at_ms - p[0] <= TAILS_KEPT_MS] or points[-1:]
    if len(out) >= 2 and out[-1][1] == length and out[-2][1] == length:
        out[-1] = [at_ms, length]
    else:
        out.append([at_ms, length])
    return out


def judge(
    samples: list[dict[str, Any]], online: int, unit: str = "bytes", who: str = "reader"
) -> tuple[str, str]:
    """The group's status and why, from its rounds' samples (``lag``: ``unit`` unread,
    ``read``: the sum of its positions, ``at``: ms, ``error``: why a round failed) and how
    many of its ``who`` are online."""
    last = samples[-1]
    if last.get("error"):
        return "ERR", str(last["error"])
    if not online:
        return "STOP", f"no {who} online"
    window = [s for s in samples[-WINDOW:] if not s.get("error")]
    if any(s["lag"] == 0 for s in window):
        return "OK", "nothing unread" if last["lag"] == 0 else "caught up within the window"
    if len(window) < WINDOW_MIN:
        return "OK", f"measuring ({len(window)} of {WINDOW_MIN} rounds)"
    seconds = (window[-1]["at"] - window[0]["at"]) / 1000
    if window[-1]["read"] == window[0]["read"]:
        return "STALL", f"positions unmoved for {seconds:.0f} s with {last['lag']:,} {unit} unread"
    if all(b["lag"] > a["lag"] for a, b in pairwise(window)):
        return "WARN", f"lag grew in each of the last {len(window)} rounds ({seconds:.0f} s)"
    return "OK", "reading"


def _events(
    lag: int, traffic: Callable[[str], SegmentTraffic | None], name: str | None
) -> int | None:
    if lag == 0:
        return 0
    found = traffic(name) if name else None
    if found is None or found.events_total <= 0 or found.bytes_total <= 0:
        return None
    return round(lag / (found.bytes_total / found.events_total))


def _sum(values: Iterable[int | None]) -> int | None:
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


# -- one group ------------------------------------------------------------------------------------


def measure(
    group: ReaderGroup, row: ReaderGroupLag, lengths: Lengths,
    traffic: Callable[[str], SegmentTraffic | None], names: Callable[[str], str | None],
    at_ms: int,
) -> dict[str, Any]:  # fmt: skip
    """Measure ``group`` into ``row`` (not saved): the report, one more sample, the status."""
    state = GroupState.load(group.sync_state)
    timeout = int(group.configuration.get("readerTimeoutMs", defaults.READER_TIMEOUT_MS))
    places: list[tuple[str | None, str, int]] = []  # (reader or None, segment key, position)
    for reader, member in sorted(state.readers.items()):
        places += [(reader, key, offset) for key, offset in sorted(member["segments"].items())]
    places += [(None, key, offset) for key, offset in sorted(state.unassigned.items())]
    places += [(None, key, 0) for key in sorted(state.future)]
    keys = {place[1] for place in places}
    tails = {key: points for key, points in row.tails.items() if key in keys}
    segments: dict[str | None, list[dict[str, Any]]] = {r: [] for r in state.readers}
    segments[None] = []
    error: str | None = None
    for holder, key, position in places:
        length = lengths(key)
        if length is None:
            error = error or f"the length of segment {key} is not known (its segment store?)"
            continue
        tails[key] = add_point(tails.get(key, []), at_ms, length)
        unread = max(length - position, 0)
        name = names(key)
        segments[holder].append({
            "segment": key, "position": position, "length": length, "lagBytes": unread,
            "lagEvents": _events(unread, traffic, name),
            "lagSeconds": age_ms(tails[key], position, at_ms) / 1000,
        })  # fmt: skip
    readers = []
    for reader, member in sorted(state.readers.items()):
        online = at_ms - int(member["seen"]) <= timeout
        readers.append({"readerId": reader, "online": online, "lastSeenMs": member["seen"],
                        **_totals(segments[reader]), "segments": segments[reader]})  # fmt: skip
    everything = [s for found in segments.values() for s in found]
    totals = _totals(everything)
    sample = {"at": at_ms, "lag": totals["lagBytes"],
              "read": sum(p[2] for p in places), **({"error": error} if error else {})}  # fmt: skip
    row.samples = [*row.samples[-(WINDOW - 1) :], sample]
    row.tails = tails
    online_count = sum(r["online"] for r in readers)
    row.status, reason = judge(row.samples, online_count)
    row.computed_at_ms = at_ms
    row.report = {
        "status": row.status, "reason": reason, "computedAtMs": at_ms,
        "periodSeconds": settings.MILLRACE.lag_period_s, "windowRounds": len(row.samples),
        "readersOnline": online_count, **totals, "readers": readers,
        "unassigned": segments[None],
    }  # fmt: skip
    report: dict[str, Any] = row.report
    return report


def _totals(segments: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "lagBytes": sum(s["lagBytes"] for s in segments),
        "lagEvents": _sum(s["lagEvents"] for s in segments),
        "lagSeconds": max((s["lagSeconds"] for s in segments), default=0.0),
    }


# -- rounds ---------------------------------------------------------------------------------------


class _Segments:
    """The segments' lengths and qualified names, each asked once a round."""

    def __init__(self, store: SegmentStorePort, read_traffic: Callable[[], Traffic]) -> None:
        self.store = store
        self.read_traffic = read_traffic
        self.streams: dict[tuple[str, str], Any] = {}
        self.found: dict[str, int | None] = {}
        self.named: dict[str, str | None] = {}
        self.monitors: Traffic | None = None

    def name(self, key: str) -> str | None:
        if key not in self.named:
            scope, stream, segment_id = split_key(key)
            try:
                if (scope, stream) not in self.streams:
                    self.streams[scope, stream] = sel.get_stream(scope, stream)
                self.named[key] = sel.segment_name(self.streams[scope, stream], segment_id)
            except Exception:  # (the stream went away meanwhile)
                self.named[key] = None
        return self.named[key]

    def traffic(self, name: str) -> SegmentTraffic | None:
        """A segment's traffic figures; the monitors are read the first time a lagging
        segment needs them (a round where nothing lags asks no node)."""
        if self.monitors is None:
            try:
                self.monitors = self.read_traffic()
            except Exception as exc:  # (no events counts this round, the rest stands)
                log.warning("lag: no traffic figures: %s", exc)
                self.monitors = Traffic({}, 0.0)
        return self.monitors.segments.get(name)

    def length(self, key: str) -> int | None:
        if key not in self.found:
            name = self.name(key)
            try:
                self.found[key] = self.store.info(name).length if name else None
            except Exception as exc:  # (a segment store away: this round says ERR)
                log.warning("lag: no length for %s: %s", key, exc)
                self.found[key] = None
        return self.found[key]


def _measure_one(group: ReaderGroup, found: _Segments, at_ms: int) -> None:
    with transaction.atomic():
        row, _ = ReaderGroupLag.objects.select_for_update().get_or_create(group=group)
        measure(group, row, found.length, found.traffic, found.name, at_ms)
        row.save()


def lag_round(
    store: SegmentStorePort, read_traffic: Callable[[], Traffic],
    also: Callable[[int, float], int] | None = None,
) -> int:  # fmt: skip
    """Measure every reader group (the beat job), then ``also(at_ms, deadline)`` (Kafka's
    consumer groups, ``controller_app.kafka_lag``); how many. One round at a time: a round
    holds the ``lag-round`` lease while it runs, and one that finds it held leaves at once.
    A round stops at its period's end: the groups it did not reach keep their last report
    (whose age the metrics show) until the next round, so a segment store that does not
    answer costs the worker at most one period."""
    from controller_app.cluster.leases import Lease

    period = settings.MILLRACE.lag_period_s
    lease = Lease(LEASE, f"{socket.gethostname()}:{os.getpid()}", ttl_s=period * 3)
    if not lease.hold():
        return 0
    try:
        groups = list(ReaderGroup.objects.select_related("scope"))
        found, at_ms = _Segments(store, read_traffic), now_ms()
        deadline = time.monotonic() + period
        measured = 0
        for group in groups:
            if time.monotonic() > deadline:
                log.warning("lag: the round ran out of its %s s after %d of %d groups", period,
                            measured, len(groups))  # fmt: skip
                break
            _measure_one(group, found, at_ms)
            measured += 1
        if also is not None:
            measured += also(at_ms, deadline)
        return measured
    finally:
        lease.release()


def lag_of(
    store: SegmentStorePort, read_traffic: Callable[[], Traffic], group: ReaderGroup
) -> dict[str, Any]:
    """The group's last report; measured now when no round has measured it yet."""
    row = ReaderGroupLag.objects.filter(group=group).first()
    if row is None or not row.report:
        _measure_one(group, _Segments(store, read_traffic), now_ms())
        row = ReaderGroupLag.objects.get(group=group)
    return dict(row.report)
