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

__all__ = [
    "QUOTA_LIMITS",
    "Allowance",
    "Bucket",
    "Demand",
    "QuotaLimit",
    "QuotaSource",
    "limit_value",
    "scope_of",
    "share",
]

#: A node asks for this much more than it used (room to grow), and at least this part of the
#: quota (room to start), when the shares are split.
GROWTH = 1.5
FLOOR = 0.05
#: The burst a bucket holds, in seconds of its rate; the longest one delay it asks at once.
BURST_SECONDS = 0.25
DELAY_MAX_SECONDS = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class QuotaLimit:
    """One limit of a scope's quota, as each face spells it."""

    #: Its name in the controller's records (``ScopeQuota``'s field).
    name: str
    #: Its field in the REST API (and the console's form).
    field: str
    #: Its command-line option (``millrace scope quota --<option>``).
    option: str
    #: What it counts (the console's label, the command's help).
    label: str


#: The limits of a scope's quota, in the order every face lists them. Each is a whole number
#: from 1, or none (no limit).
QUOTA_LIMITS = (
    QuotaLimit("append_bytes_per_s", "appendBytesPerSecond", "append-bytes",
               "append bytes/s, cluster-wide"),
    QuotaLimit("append_events_per_s", "appendEventsPerSecond", "append-events",
               "append events/s, cluster-wide"),
    QuotaLimit("read_bytes_per_s", "readBytesPerSecond", "read-bytes",
               "read bytes/s, cluster-wide"),
    QuotaLimit("stored_bytes", "storedBytes", "stored-bytes", "stored bytes"),
    QuotaLimit("streams", "streams", "streams", "streams"),
    QuotaLimit("segments", "segments", "segments", "segments of the streams' current epochs"),
    QuotaLimit("reader_groups", "readerGroups", "reader-groups", "reader groups"),
    QuotaLimit("tables", "tables", "tables", "key-value tables"),
)  # fmt: skip


def limit_value(what: str, value: object, *, zero_is_none: bool = False) -> int | None:
    """A limit as given (``None``: no limit; with ``zero_is_none``, 0 too, as the command line
    and the console take it), or ``ValueError`` saying why it is not one."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{what} must be a whole number, not {text!r}") from None
    if value is None or (zero_is_none and value == 0):
        return None
    if type(value) is not int or value < 1:
        none = "0 or empty" if zero_is_none else "null"
        raise ValueError(f"{what} must be a whole number from 1, or {none} for none")
    return value


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
