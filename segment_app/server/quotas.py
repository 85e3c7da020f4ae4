"""Scope quotas on a segment store node: appends and reads let through at the node's share of
each scope's rate quotas by delaying them, and appends refused while a scope is at its
stored-bytes quota (with ``refuse``).

Responsibility: count what each scope appends and reads here and charge it to the scope's
buckets. An append charged while its scope is over (``scope_charged``, ``wait``) holds its
client's connection: nothing more is read from it until the scope is back within its rate
(Kafka's throttle, which mutes the channel: the writers then wait on their own windows, and
their acknowledgements come at the rate). A read reply waits (``charge_read``). Once a second
``exchange`` hands the measured demand to the ``QuotaSource`` and takes the new allowances
(``millrace.kernel.quotas``). Nothing is charged on a node with no quota at all; a scope without
one costs a dictionary lookup per append received.
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

    def scope_charged(self, segment: str, size: int, events: int) -> str | None:
        """Count an append just received and charge it to its scope's rate quotas; the scope
        when it has any (its client then ``wait``s), else None."""
        scope = scope_of(segment)
        if scope is None:
            return None
        counted = self._counted[scope]
        counted[0] += size
        counted[1] += events
        allowance = self.allowances.get(scope)
        if allowance is None or (
            allowance.append_bytes is None and allowance.append_events is None
        ):
            return None
        self._delay(scope, "append_bytes", allowance.append_bytes, size)
        self._delay(scope, "append_events", allowance.append_events, events)
        return scope

    def wait(self, scope: str) -> float:
        """Seconds until ``scope`` is back within its append rates here (0: it is)."""
        return max(
            (b.debt_seconds() for (s, kind), b in self._buckets.items()
             if s == scope and kind.startswith("append")),
            default=0.0,
        )  # fmt: skip

    def held(self, scopes: set[str], seconds: float) -> None:
        """A client of ``scopes`` was held ``seconds`` (the throttle time they are charged)."""
        for scope in scopes:
            if scope in self.allowances:
                self.throttled[scope] += seconds

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
