"""Scope quotas as a segment store node enforces them: what it is allowed, what it measured.

Part of the Django-free kernel. A node exchanges, once a second, what it measured of each
scope (``Demand``) for what it may let through (``Allowance``), through a ``QuotaSource`` (the
controller's metadata database in a cluster or a standalone node). A rate quota holds across the
cluster: each node takes a share of it (``share``) by what it and the other nodes measured, so
that the shares add up to the quota and follow where the scope's traffic is. A node lets a
scope through at its share by delaying acknowledgements and reads (``Bucket``), never by
refusing them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

__all__ = ["Allowance", "Bucket", "Demand", "QuotaSource", "scope_of", "share"]

#: A node asks for this much more than it used (room to grow), and at least this part of the
#: quota (room to start), when the shares are split.
GROWTH = 1.5
FLOOR = 0.05
#: The burst a bucket holds, in seconds of its rate; the longest one delay it asks at once.
BURST_SECONDS = 0.25
DELAY_MAX_SECONDS = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class Demand:
    """What a node measured of a scope over its last exchange period (per second), and the
    delay it added since it started (seconds, a counter)."""

    append_bytes: float = 0.0
    append_events: float = 0.0
    read_bytes: float = 0.0
    throttle_seconds: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class Allowance:
    """What a node may let through of a scope, per second (None: no limit), and why its
    appends are refused (its stored-bytes quota is reached, with ``refuse``)."""

    append_bytes: float | None = None
    append_events: float | None = None
    read_bytes: float | None = None
    refusal: str | None = None


class QuotaSource(Protocol):
    def exchange(self, node: str, demand: Mapping[str, Demand]) -> Mapping[str, Allowance]:
        """Record ``node``'s demand; the allowances of the scopes with quotas (blocking)."""


def share(quota: float, mine: float, others: Iterable[float]) -> float:
    """This node's share of a cluster-wide rate ``quota``, by what it (``mine``) and the other
    nodes serving the scope measured last: each asks ``GROWTH`` times its use, at least
    ``FLOOR`` of the quota, and the quota is split in proportion."""

    def want(used: float) -> float:
        return max(used * GROWTH, quota * FLOOR)

    total = want(mine) + sum(want(used) for used in others)
    return quota * want(mine) / total


def scope_of(segment: str) -> str | None:
    """The scope a segment's rates count against, None for an internal one (a reader group's
    or a writer's own stream, the system scope)."""
    scope, _, rest = segment.partition("/")
    if not rest or scope.startswith("_") or rest.startswith("_"):
        return None
    return scope


class Bucket:
    """A token bucket at ``rate`` per second that goes into debt: ``charge`` takes ``amount``
    at once and answers how long to wait before the debt is paid (0 within the burst)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.rate = max(rate, 1.0)
        self.level = self.rate * BURST_SECONDS
        self.at = clock()

    def set_rate(self, rate: float) -> None:
        self._refill()
        self.rate = max(rate, 1.0)

    def _refill(self) -> None:
        now = self._clock()
        self.level = min(self.rate * BURST_SECONDS, self.level + (now - self.at) * self.rate)
        self.at = now

    def charge(self, amount: float) -> float:
        self._refill()
        self.level -= amount
        return min(-self.level / self.rate, DELAY_MAX_SECONDS) if self.level < 0 else 0.0

    def debt_seconds(self) -> float:
        """Seconds until the debt is paid (0: none)."""
        self._refill()
        return -self.level / self.rate if self.level < 0 else 0.0
