"""Leases in the metadata database: one holder at a time, by conditional UPDATE.

Responsibility: ``Lease(name, holder, ttl_s)`` takes the ``ClusterLease`` row called ``name``
when it is free or expired (a new ``term``), renews it while held, and tells its holder the
moment a renewal finds it taken (the row's holder or term changed). Expiry is in wall-clock ms:
the hosts' clocks must agree to well under a TTL (NTP does). No consensus protocol of our own:
the database serializes the UPDATEs, and a renewal that races an expiry simply loses.
"""

from __future__ import annotations

import logging
import time

from django.db.models import F, Q

from controller_app.models import ClusterLease

__all__ = ["Lease", "LeaseGate", "now_ms"]

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


class Lease:
    def __init__(self, name: str, holder: str, ttl_s: float) -> None:
        self.name = name
        self.holder = holder
        self.ttl_ms = int(ttl_s * 1000)
        #: The term this process holds the lease in, or None.
        self.term: int | None = None

    @property
    def held(self) -> bool:
        return self.term is not None

    def hold(self) -> bool:
        """Take the lease if free or expired, else renew it if held; whether it is held now.
        Database errors propagate (the caller decides; the lease then expires by itself)."""
        now = now_ms()
        if self.term is not None:
            renewed = ClusterLease.objects.filter(
                name=self.name, holder=self.holder, term=self.term
            ).update(expires_ms=now + self.ttl_ms)
            if renewed:
                return True
            self.term = None  # taken over: another process holds it now
        ClusterLease.objects.get_or_create(name=self.name)
        taken = (
            ClusterLease.objects.filter(name=self.name)
            .filter(Q(expires_ms__lt=now) | Q(holder=self.holder))
            .update(holder=self.holder, term=F("term") + 1, expires_ms=now + self.ttl_ms)
        )
        if taken:
            self.term = ClusterLease.objects.values_list("term", flat=True).get(name=self.name)
        return self.term is not None

    def release(self) -> None:
        """Give the lease up (a clean stop): another process may take it at once."""
        if self.term is not None:
            ClusterLease.objects.filter(name=self.name, holder=self.holder, term=self.term).update(
                expires_ms=0
            )
            self.term = None


class LeaseGate:
    """Whether this process may act now, as the holder of lease ``name`` (one Celery beat of
    several ticks): ``may_act()`` holds or takes the lease at most every ``check_s`` seconds.
    While the database does not answer, a holder goes on until its lease would have expired,
    then stops (another may take it once the database is back); a process that does not hold
    it waits."""

    def __init__(self, name: str, holder: str, ttl_s: float, check_s: float) -> None:
        self.lease = Lease(name, holder, ttl_s)
        self.ttl_s, self.check_s = ttl_s, check_s
        self._checked_at = float("-inf")
        self._held_until = float("-inf")

    def held(self, now: float) -> bool:
        """Whether the last check took or kept the lease and it has not run out (no query)."""
        return self._held_until > now

    def may_act(self, now: float) -> bool:
        """``now``: a monotonic time."""
        if now - self._checked_at >= self.check_s:
            self._checked_at = now
            was = self._held_until > now
            try:
                held = self.lease.hold()
            except Exception as exc:
                if was:
                    log.warning("cannot renew the %s lease (%s); acting on until it expires",
                                self.lease.name, type(exc).__name__)  # fmt: skip
            else:
                self._held_until = now + self.ttl_s if held else float("-inf")
                if held != was:
                    log.warning("%s the %s lease (term %s)", "took" if held else "lost",
                                self.lease.name, self.lease.term)  # fmt: skip
        return self._held_until > now
