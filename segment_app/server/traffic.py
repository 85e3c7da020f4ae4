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

import dataclasses
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from millrace.naming import parent_name

#: Pravega's traffic windows (seconds), beside the decision window.
PRAVEGA_WINDOWS_S = (120, 300, 600, 1200)
#: A segment without traffic is forgotten once its rates fell below this (events/s) ...
_IDLE_RATE = 0.01
#: ... and nothing was appended to it for this many decision windows.
_IDLE_WINDOWS = 3


@dataclasses.dataclass(slots=True)
class _Rates:
    first_seen: float
    last_seen: float
    events: list[float]  # events/s per window
    bytes: list[float]  # bytes/s per window
    total_events: int = 0
    total_bytes: int = 0


class TrafficMonitor:
    """Per-segment append rates over ``windows_s`` (the first is the decision window)."""

    def __init__(self, decision_window_s: float, *, clock: Any = time.monotonic) -> None:
        if decision_window_s <= 0:
            raise ValueError(f"the decision window must be positive, not {decision_window_s}")
        self.windows_s: tuple[float, ...] = (decision_window_s, *PRAVEGA_WINDOWS_S)
        self._clock = clock
        self._counts: dict[str, list[int]] = {}
        self._rates: dict[str, _Rates] = {}
        self._started = self._last_tick = clock()
        self._snapshot: list[dict[str, Any]] = []
        #: Seconds from the monitor's start to its last tick.
        self.uptime_s = 0.0

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
        """Fold the counts since the last tick into the rates; build the snapshot."""
        now = self._clock()
        elapsed = now - self._last_tick
        if elapsed <= 0:
            return
        self._last_tick = now
        self.uptime_s = now - self._started
        counts, self._counts = self._counts, {}
        decay = [math.exp(-elapsed / window) for window in self.windows_s]
        idle_after = self.windows_s[0] * _IDLE_WINDOWS
        for segment in set(self._rates) | set(counts):
            events, size = counts.get(segment, (0, 0))
            rates = self._rates.get(segment)
            if rates is None:
                zero = [0.0] * len(decay)
                rates = self._rates[segment] = _Rates(now - elapsed, now, zero, list(zero))
            if events:
                rates.last_seen = now
                rates.total_events += events
                rates.total_bytes += size
            _fold(rates.events, events / elapsed, decay)
            _fold(rates.bytes, size / elapsed, decay)
            if now - rates.last_seen > idle_after and rates.events[0] < _IDLE_RATE:
                del self._rates[segment]
        self._snapshot = [
            {
                "segment": segment,
                "eventsPerSecond": round(rates.events[0], 3),
                "bytesPerSecond": round(rates.bytes[0], 3),
                "windows": {
                    f"{window:g}": [round(e, 3), round(b, 3)]
                    for window, e, b in zip(self.windows_s, rates.events, rates.bytes, strict=True)
                },
                "seenForSeconds": round(now - rates.first_seen, 3),
                "events": rates.total_events,
                "bytes": rates.total_bytes,
            }
            for segment, rates in sorted(self._rates.items())
        ]

    def forget(self, segments: Iterable[str]) -> None:
        """Stop reporting ``segments`` (deleted)."""
        for segment in segments:
            self._rates.pop(segment, None)
            self._counts.pop(segment, None)

    def snapshot(self) -> Sequence[dict[str, Any]]:
        """The rates as of the last tick: one entry per segment, by name (see module doc)."""
        return self._snapshot


def _fold(rates: list[float], instant: float, decay: list[float]) -> None:
    for i, keep in enumerate(decay):
        rates[i] = rates[i] * keep + instant * (1.0 - keep)
