"""The traffic monitor: events and bytes per second appended to each segment, over windows.

The wire connections count what they acknowledge (``record``: one call per acknowledged
block, two additions); once a second ``tick`` turns the counts into rates, each an
exponentially weighted moving average whose time constant is a window: the decision window
the controller's auto-scaler uses (``MILLRACE_AUTOSCALE_WINDOW_S``) and Pravega's 2, 5, 10 and
20 minutes. ``snapshot`` is what the node's metrics port serves (``/traffic`` as JSON, and the
Prometheus metrics): a new immutable list each tick, so the HTTP thread reads it as it is.

Pravega's segment store compares the rates with each segment's scaling policy and posts scale
reports; here the controller reads the rates and decides (docs/decisions/0005). Transaction,
transient and attribute segments are not counted (their data reaches a stream segment by a
merge).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any

from millrace.kernel.naming import parent_name

#: Pravega's traffic windows (seconds), beside the decision window.
PRAVEGA_WINDOWS_S = (120, 300, 600, 1200)
#: A segment without traffic is forgotten once its rates fell below this (events/s) ...
_IDLE_RATE = 0.01
#: ... and nothing was appended to it for this many decision windows.
_IDLE_WINDOWS = 3


#: Upper bounds (seconds) of the acknowledgement latency histogram's buckets.
LATENCY_BOUNDS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)

#: The long windows are folded every this many seconds (the decision window every tick).
LONG_FOLD_SECONDS = 10.0


@dataclasses.dataclass(slots=True)
class _Rates:
    first_seen: float
    last_seen: float
    events: float = 0.0  # events/s over the decision window
    bytes: float = 0.0  # bytes/s over the decision window
    long_events: list[float] = dataclasses.field(default_factory=list)  # per long window
    long_bytes: list[float] = dataclasses.field(default_factory=list)
    #: Counts since the long windows were last folded.
    pending_events: int = 0
    pending_bytes: int = 0
    total_events: int = 0
    total_bytes: int = 0


#: One segment in the snapshot: (segment, events/s, bytes/s, long windows' events/s, their
#: bytes/s, seconds measured, total events, total bytes). Tuples: cheap to make each tick.
Entry = tuple[str, float, float, tuple[float, ...], tuple[float, ...], float, int, int]


class TrafficMonitor:
    """Per-segment append rates over the decision window and ``PRAVEGA_WINDOWS_S``."""

    def __init__(self, decision_window_s: float, *, clock: Any = time.monotonic) -> None:
        if decision_window_s <= 0:
            raise ValueError(f"the decision window must be positive, not {decision_window_s}")
        self.windows_s: tuple[float, ...] = (decision_window_s, *PRAVEGA_WINDOWS_S)
        self._clock = clock
        self._counts: dict[str, list[int]] = {}
        self._rates: dict[str, _Rates] = {}
        self._started = self._last_tick = self._last_long = clock()
        self._snapshot: list[Entry] = []
        #: Seconds from the monitor's start to its last tick.
        self.uptime_s = 0.0
        #: Acknowledgement latency of append groups: counts per ``LATENCY_BOUNDS_S`` bucket
        #: (the last: above them all), and their sum in seconds.
        self.latency_counts = [0] * (len(LATENCY_BOUNDS_S) + 1)
        self.latency_sum = 0.0

    def record_latency(self, seconds: float) -> None:
        """One group of appends was acknowledged ``seconds`` after the store was handed it."""
        self.latency_counts[bisect.bisect_left(LATENCY_BOUNDS_S, seconds)] += 1
        self.latency_sum += seconds

    def record(self, segment: str, events: int, size: int) -> None:
        """``events`` events of ``size`` bytes (headers counted) were acknowledged."""
        counts = self._counts.get(segment)
        if counts is None:
            if parent_name(segment) != segment:
                return
            counts = self._counts[segment] = [0, 0]
        counts[0] += events
        counts[1] += size

    def tick(self) -> None:
        """Fold the counts since the last tick into the rates; take the snapshot."""
        now = self._clock()
        elapsed = now - self._last_tick
        if elapsed <= 0:
            return
        self._last_tick = now
        self.uptime_s = now - self._started
        counts, self._counts = self._counts, {}
        keep = math.exp(-elapsed / self.windows_s[0])
        take = (1.0 - keep) / elapsed
        long_elapsed = now - self._last_long
        fold_long = long_elapsed >= LONG_FOLD_SECONDS
        if fold_long:
            self._last_long = now
            long_keep = [math.exp(-long_elapsed / w) for w in self.windows_s[1:]]
        idle_after = self.windows_s[0] * _IDLE_WINDOWS
        rates_of = self._rates
        for segment, (events, size) in counts.items():
            rates = rates_of.get(segment)
            if rates is None:
                zero = [0.0] * (len(self.windows_s) - 1)
                rates = rates_of[segment] = _Rates(now - elapsed, now, 0.0, 0.0, zero, list(zero))
            rates.last_seen = now
            rates.total_events += events
            rates.total_bytes += size
            rates.pending_events += events
            rates.pending_bytes += size
        snapshot: list[Entry] = []
        for segment in list(rates_of):
            rates = rates_of[segment]
            events, size = counts.get(segment, (0, 0))
            rates.events = rates.events * keep + events * take
            rates.bytes = rates.bytes * keep + size * take
            if fold_long:
                e_rate = rates.pending_events / long_elapsed
                b_rate = rates.pending_bytes / long_elapsed
                rates.long_events = [
                    r * k + e_rate * (1.0 - k)
                    for r, k in zip(rates.long_events, long_keep, strict=True)
                ]
                rates.long_bytes = [
                    r * k + b_rate * (1.0 - k)
                    for r, k in zip(rates.long_bytes, long_keep, strict=True)
                ]
                rates.pending_events = rates.pending_bytes = 0
            if now - rates.last_seen > idle_after and rates.events < _IDLE_RATE:
                del rates_of[segment]
                continue
            snapshot.append((segment, rates.events, rates.bytes, tuple(rates.long_events),
                             tuple(rates.long_bytes), now - rates.first_seen,
                             rates.total_events, rates.total_bytes))  # fmt: skip
        snapshot.sort()
        self._snapshot = snapshot

    def snapshot(self) -> Sequence[Entry]:
        """The rates as of the last tick, by segment name (a list replaced whole each tick)."""
        return self._snapshot

    def describe(self) -> list[dict[str, Any]]:
        """The snapshot as ``/traffic`` shows it (any thread may call this)."""
        windows = [f"{w:g}" for w in self.windows_s]
        return [
            {
                "segment": segment,
                "eventsPerSecond": round(events, 3),
                "bytesPerSecond": round(size, 3),
                "windows": dict(
                    zip(
                        windows,
                        [[round(events, 3), round(size, 3)]]
                        + [[round(e, 3), round(b, 3)] for e, b in zip(long_e, long_b, strict=True)],
                        strict=True,
                    )
                ),
                "seenForSeconds": round(seen, 3),
                "events": total_events,
                "bytes": total_bytes,
            }
            for segment, events, size, long_e, long_b, seen, total_events, total_bytes in (
                self._snapshot
            )
        ]
