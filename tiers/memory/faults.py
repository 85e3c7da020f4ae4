"""Deterministic fault and latency injection for the in-memory tiers.

Responsibility: decide, per call of a named primitive, whether it fails and how long it takes,
from rules set by a test and one seeded ``random.Random`` (so a seeded simulation replays the same
faults). Primitive names are the backend's ``_do_*`` method names without the prefix:
tier-1 ``open``, ``append_batch``, ``read_batch``, ``truncate``, ``close``; tier-2 ``create``,
``create_with_data``, ``write``, ``read``, ``delete``, ``exists``, ``length``, ``concat``,
``close``. The name ``"*"`` in a rule matches every primitive.

An injected failure happens *before* the primitive changes anything, so a failed tier-1 append
is never durable, as the contract requires. Latency is awaited with ``asyncio.sleep`` before the
primitive runs (a sync primitive cannot sleep without blocking the event loop), so while a
tier-1 append is delayed the next frames queue up and group commit forms batches, as on a disk.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
from collections.abc import Callable

__all__ = ["ANY", "ErrorFactory", "FaultInjector", "inject"]

#: Rule name that matches every primitive.
ANY = "*"

ErrorFactory = Callable[[str], BaseException]


@dataclasses.dataclass(slots=True)
class _Rule:
    remaining: int | None  # None: unlimited (probability rules)
    probability: float
    error: ErrorFactory | None


class FaultInjector:
    """Failure and latency rules for named primitives, driven by a seeded random generator."""

    def __init__(self, seed: int = 0) -> None:
        self.random = random.Random(seed)
        #: How many times each primitive was called (failed calls included).
        self.calls: collections.Counter[str] = collections.Counter()
        #: How many injected failures each primitive raised.
        self.failures: collections.Counter[str] = collections.Counter()
        self._rules: dict[str, list[_Rule]] = collections.defaultdict(list)
        self._latency: dict[str, tuple[float, float]] = {}

    # -- rules -------------------------------------------------------------------------------

    def fail_next(self, primitive: str, count: int = 1, error: ErrorFactory | None = None) -> None:
        """Make the next ``count`` calls of ``primitive`` fail."""
        if count < 1:
            raise ValueError("count must be >= 1")
        self._rules[primitive].append(_Rule(count, 1.0, error))

    def fail_randomly(
        self, primitive: str, probability: float, error: ErrorFactory | None = None
    ) -> None:
        """Make each call of ``primitive`` fail with ``probability`` (until ``clear``)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError("probability must be in [0, 1]")
        self._rules[primitive].append(_Rule(None, probability, error))

    def add_latency(self, primitive: str, seconds: float, jitter_seconds: float = 0.0) -> None:
        """Delay each call of ``primitive`` by ``seconds`` plus up to ``jitter_seconds``."""
        if seconds < 0 or jitter_seconds < 0:
            raise ValueError("latency must be >= 0")
        self._latency[primitive] = (seconds, jitter_seconds)

    def clear(self) -> None:
        """Drop every rule (counters are kept)."""
        self._rules.clear()
        self._latency.clear()

    # -- used by the backends ----------------------------------------------------------------

    def delay_for(self, primitive: str) -> float:
        """Seconds the next call of ``primitive`` should take (0 unless configured)."""
        rule = self._latency.get(primitive) or self._latency.get(ANY)
        if rule is None:
            return 0.0
        seconds, jitter = rule
        return seconds + (self.random.uniform(0.0, jitter) if jitter else 0.0)

    def check(self, primitive: str, default_error: ErrorFactory) -> None:
        """Count a call of ``primitive`` and raise if a rule says it fails."""
        self.calls[primitive] += 1
        for name in (primitive, ANY):
            for rule in self._rules.get(name, ()):
                if self._fires(rule):
                    self.failures[primitive] += 1
                    factory = rule.error or default_error
                    raise factory(f"injected fault in {primitive!r}")

    def _fires(self, rule: _Rule) -> bool:
        if rule.remaining is not None:
            if rule.remaining <= 0:
                return False
            rule.remaining -= 1  # spent rules stay (inert) until clear(): lists stay tiny
            return True
        return rule.probability > 0 and self.random.random() < rule.probability


async def inject(faults: FaultInjector | None, fn: object, default_error: ErrorFactory) -> None:
    """Apply ``faults`` before the primitive ``fn`` runs: await its latency, maybe raise."""
    if faults is None:
        return
    primitive = getattr(fn, "__name__", "?").removeprefix("_do_")
    delay = faults.delay_for(primitive)
    if delay:
        await asyncio.sleep(delay)
    faults.check(primitive, default_error)
