"""Scope quotas on a segment store node: appends and reads let through at the node's share of
each scope's rate quotas by delaying them, and appends refused while a scope is at its
stored-bytes quota (with ``refuse``).

Responsibility: count what each scope appends and reads here, and answer how long an
acknowledgement or a read reply waits (``charge_append``, ``charge_read``); the connection
holds the reply that long and reads nothing more from that client meanwhile (Kafka's throttle:
the client's own window then keeps it at the rate). Once a second ``exchange`` hands the
measured demand to the ``QuotaSource`` and takes the new allowances (``millrace.kernel.quotas``).
Scopes without a quota cost one dictionary lookup per acknowledged part.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping

from millrace.kernel.quotas import Allowance, Bucket, Demand, QuotaSource, scope_of

__all__ = ["EXCHANGE_SECONDS", "ScopeThrottles", "exchange_loop"]

log = logging.getLogger(__name__)

#: How often a node tells what it measured and takes its allowances.
EXCHANGE_SECONDS = 1.0


class ScopeThrottles:
    """The allowances of this node, its buckets, and what it measured since the last exchange."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.allowances: dict[str, Allowance] = {}
        self._buckets: dict[tuple[str, str], Bucket] = {}
        #: scope -> [append bytes, append events, read bytes] since the last exchange.
        self._counted: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        #: scope -> seconds of delay added, since the node started.
        self.throttled: dict[str, float] = defaultdict(float)
        self._since = clock()

    def _delay(self, scope: str, kind: str, rate: float | None, amount: float) -> float:
        if rate is None:
            return 0.0
        bucket = self._buckets.get((scope, kind))
        if bucket is None:
            bucket = self._buckets[scope, kind] = Bucket(rate, self._clock)
        return bucket.charge(amount)

    def charge_append(self, segment: str, size: int, events: int) -> float:
        """Count an acknowledged append; the seconds its acknowledgement waits."""
        scope = scope_of(segment)
        if scope is None:
            return 0.0
        counted = self._counted[scope]
        counted[0] += size
        counted[1] += events
        allowance = self.allowances.get(scope)
        if allowance is None:
            return 0.0
        delay = max(
            self._delay(scope, "append_bytes", allowance.append_bytes, size),
            self._delay(scope, "append_events", allowance.append_events, events),
        )
        self.throttled[scope] += delay
        return delay

    def charge_read(self, segment: str, size: int) -> float:
        """Count a read's bytes; the seconds its reply waits."""
        scope = scope_of(segment)
        if scope is None or size <= 0:
            return 0.0
        self._counted[scope][2] += size
        allowance = self.allowances.get(scope)
        if allowance is None:
            return 0.0
        delay = self._delay(scope, "read_bytes", allowance.read_bytes, size)
        self.throttled[scope] += delay
        return delay

    def refusal(self, segment: str) -> str | None:
        """Why appends to ``segment`` are refused now (its scope is at its stored-bytes
        quota), or None."""
        scope = scope_of(segment)
        allowance = self.allowances.get(scope) if scope is not None else None
        return allowance.refusal if allowance is not None else None

    def demand(self) -> dict[str, Demand]:
        """What each scope appended and read here per second since the last call."""
        now = self._clock()
        elapsed = max(now - self._since, 1e-3)
        counted, self._counted = self._counted, defaultdict(lambda: [0.0, 0.0, 0.0])
        self._since = now
        scopes = set(counted) | set(self.allowances)
        return {
            scope: Demand(
                counted[scope][0] / elapsed if scope in counted else 0.0,
                counted[scope][1] / elapsed if scope in counted else 0.0,
                counted[scope][2] / elapsed if scope in counted else 0.0,
                self.throttled.get(scope, 0.0),
            )
            for scope in scopes
        }

    def update(self, allowances: Mapping[str, Allowance]) -> None:
        """Take new allowances: the buckets of a scope keep their level at the new rate."""
        self.allowances = dict(allowances)
        for (scope, kind), bucket in list(self._buckets.items()):
            rate = getattr(self.allowances.get(scope), kind, None)
            if rate is None:
                del self._buckets[scope, kind]
            else:
                bucket.set_rate(rate)


async def exchange_loop(node: str, throttles: ScopeThrottles, source: QuotaSource) -> None:
    """Every ``EXCHANGE_SECONDS``: this node's demand for the allowances (in a thread). While
    the source cannot answer, the last allowances hold."""
    while True:
        await asyncio.sleep(EXCHANGE_SECONDS)
        demand = throttles.demand()
        try:
            allowances = await asyncio.to_thread(source.exchange, node, demand)
        except Exception as exc:  # the metadata database away: the last allowances hold
            log.warning("quota exchange failed; the last allowances hold: %s", exc)
            continue
        throttles.update(allowances)
