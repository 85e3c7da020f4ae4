"""Scope quotas as a node enforces them (``millrace.kernel.quotas``,
``segment_app.server.quotas``): shares of a cluster-wide rate, the bucket's debt, what is
charged and to which scope, and the allowances an exchange hands over."""

from __future__ import annotations

import pytest

from millrace.kernel.quotas import FLOOR, Allowance, Bucket, Demand, scope_of, share
from segment_app.server.quotas import ScopeThrottles


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_shares_add_up_to_the_quota_and_follow_the_traffic() -> None:
    assert share(1000, 0, []) == 1000  # alone: all of it
    three = [share(900, 300, [300, 300]) for _ in range(3)]
    assert sum(three) == pytest.approx(900) and three[0] == pytest.approx(300)
    busy, idle = share(1000, 800, [0]), share(1000, 0, [800])
    assert busy + idle == pytest.approx(1000)
    assert idle == pytest.approx(1000 * FLOOR * 1000 / (1200 + FLOOR * 1000))  # room to start
    assert busy > 900


def test_a_bucket_goes_into_debt_and_pays_it_at_its_rate() -> None:
    clock = Clock()
    bucket = Bucket(1000, clock)
    assert bucket.charge(250) == 0.0  # the burst
    assert bucket.charge(1000) == pytest.approx(1.0)
    clock.now += 0.5
    assert bucket.debt_seconds() == pytest.approx(0.5)
    bucket.set_rate(2000)
    assert bucket.debt_seconds() == pytest.approx(0.25)


def test_internal_segments_count_against_no_scope() -> None:
    assert scope_of("team/orders/0.#epoch.0") == "team"
    assert scope_of("team/_RGgroup/0.#epoch.0") is None
    assert scope_of("_system/canary/3.#epoch.0") is None


def test_a_node_charges_its_scopes_and_reports_what_it_saw() -> None:
    clock = Clock()
    throttles = ScopeThrottles(clock)
    assert throttles.scope_charged("free/s/0.#epoch.0", 500, 5) is None  # no quota: counted
    throttles.update({"lim": Allowance(append_bytes=1000.0)})
    assert throttles.scope_charged("lim/s/0.#epoch.0", 3250, 10) == "lim"
    assert throttles.wait("lim") == pytest.approx(3.0)
    assert throttles.wait("free") == 0.0
    throttles.held({"lim"}, 3.0)
    clock.now += 2.0
    demand = throttles.demand()
    assert demand["free"] == Demand(250.0, 2.5, 0.0, 0.0)
    assert demand["lim"].append_bytes == pytest.approx(1625.0)
    assert demand["lim"].throttle_seconds == 3.0
    assert throttles.wait("lim") == pytest.approx(1.0)
    throttles.update({})  # the quota removed: nothing waits
    assert throttles.wait("lim") == 0.0


def test_reads_wait_and_a_full_scope_refuses_appends() -> None:
    throttles = ScopeThrottles(Clock())
    throttles.update({"lim": Allowance(read_bytes=100.0, refusal="lim is at its quota")})
    assert throttles.charge_read("lim/s/0.#epoch.0", 125) == pytest.approx(1.0)
    assert throttles.refusal("lim/s/0.#epoch.0") == "lim is at its quota"
    assert throttles.refusal("free/s/0.#epoch.0") is None
