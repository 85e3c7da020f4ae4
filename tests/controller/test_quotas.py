"""Quotas per scope in the controller (``controller_app.quotas``): set and shown over REST by
an admin, counts refused at create on every path, the nodes' exchange splitting a rate quota
and refusing a full scope, and the stored bytes measured."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from controller_app import quotas
from controller_app.access.roles import grant
from controller_app.models import QuotaUsage, ScopeQuota
from controller_app.segment_client import segment_store
from controller_app.workflows import scopes, streams
from controller_app.workflows.config import StreamConfig
from millrace.kernel.quotas import Demand
from tests.controller.conftest import write_events

pytestmark = pytest.mark.django_db


def _client(role: str) -> APIClient:
    user = get_user_model().objects.create_user(f"{role}{uuid.uuid4().hex[:6]}", password=None)
    grant(user, role)  # type: ignore[arg-type]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def test_an_admin_sets_a_quota_others_read_it_and_counts_refuse_creates(
    registered_node: Any,
) -> None:
    sc = f"q{uuid.uuid4().hex[:8]}"
    scopes.create_scope(sc)
    admin, operator = _client("admin"), _client("operator")
    body = {"streams": 1, "segments": 3, "appendBytesPerSecond": 1000, "storedPolicy": "truncate"}
    assert operator.put(f"/v1/scopes/{sc}/quota", body, format="json").status_code == 403
    answer = admin.put(f"/v1/scopes/{sc}/quota", body, format="json")
    assert answer.status_code == 200, answer.json()
    shown = operator.get(f"/v1/scopes/{sc}/quota").json()
    assert shown["limits"]["streams"] == 1 and shown["storedPolicy"] == "truncate"
    assert shown["used"]["streams"] == 0
    fixed = {"type": "FIXED_NUM_SEGMENTS", "minSegments": 4}
    too_many = {"streamName": "s", "scalingPolicy": fixed}
    refused = operator.post(f"/v1/scopes/{sc}/streams", too_many, format="json")
    assert refused.status_code == 409, refused.json()
    assert refused.json() == {
        "code": "quota-exceeded",
        "message": f"scope {sc} may hold 3 segments (its quota); it holds 0, and this adds 4",
    }
    streams.create_stream(segment_store(), sc, "a", StreamConfig(min_segments=2))
    second = operator.post(f"/v1/scopes/{sc}/streams", {"streamName": "b"}, format="json")
    assert second.json()["code"] == "quota-exceeded" and "1 streams" in second.json()["message"]
    bad = admin.put(f"/v1/scopes/{sc}/quota", {"streams": 0}, format="json")
    assert bad.status_code == 400
    cleared = {k: None for k in ("streams", "segments", "appendBytesPerSecond")}
    assert admin.put(f"/v1/scopes/{sc}/quota", cleared, format="json").status_code == 200
    assert not ScopeQuota.objects.filter(scope__name=sc).exists()  # no limit left: no quota


def test_the_exchange_splits_a_rate_between_nodes_and_refuses_a_full_scope(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quotas, "close_old_connections", lambda: None)  # (the test's transaction)
    scopes.create_scope("lim")
    quotas.set_quota("lim", {"append_bytes_per_s": 900, "stored_bytes": 100})
    source = quotas.DatabaseQuotas()
    first = source.exchange("n1", {"lim": Demand(append_bytes=600.0)})["lim"]
    assert first.append_bytes == 900 and first.refusal is None  # alone so far
    second = source.exchange("n2", {"lim": Demand(append_bytes=300.0)})["lim"]
    again = source.exchange("n1", {"lim": Demand(append_bytes=600.0)})["lim"]
    assert second.append_bytes + again.append_bytes == pytest.approx(900)
    assert again.append_bytes == pytest.approx(600)
    stale = timezone.now() - dt.timedelta(seconds=quotas.FRESH_SECONDS + 1)
    QuotaUsage.objects.filter(node="n2").update(at=stale)
    assert source.exchange("n1", {"lim": Demand(append_bytes=600.0)})["lim"].append_bytes == 900
    ScopeQuota.objects.filter(scope__name="lim").update(stored_bytes_used=100)
    full = source.exchange("n1", {})["lim"]
    assert full.refusal is not None and "at its stored-bytes quota (100 of 100 bytes)" in (
        full.refusal
    )
    assert source.exchange("n1", {"free": Demand(append_bytes=5.0)}).keys() == {"lim"}


def test_the_stored_bytes_are_measured(registered_node: Any) -> None:
    sc = f"q{uuid.uuid4().hex[:8]}"
    scopes.create_scope(sc)
    stream = streams.create_stream(segment_store(), sc, "s", StreamConfig(min_segments=1))
    quotas.set_quota(sc, {"stored_bytes": 10_000})
    from controller_app import selectors as sel

    segment = sel.current_segments(stream)[0]
    write_events(registered_node.port, sel.segment_name(stream, segment.id), b"x" * 292)
    assert quotas.stored_round(segment_store())[sc] == 300  # (with the event's 8-byte header)
    assert quotas.quota_of(scopes.get_scope(sc))["used"]["storedBytes"] == 300


def test_a_truncating_scope_is_cut_oldest_first_and_keeps_few_records(
    registered_node: Any,
) -> None:
    from controller_app import selectors as sel
    from controller_app.choices import StreamState
    from controller_app.models import AuditEntry, StreamCutRecord
    from controller_app.workflows.truncate import run_truncate

    sc = f"q{uuid.uuid4().hex[:8]}"
    scopes.create_scope(sc)
    stream = streams.create_stream(segment_store(), sc, "s", StreamConfig(min_segments=1))
    quotas.set_quota(sc, {"stored_bytes": 1_000}, "truncate")
    name = sel.segment_name(stream, sel.current_segments(stream)[0].id)
    stored = []
    for _ in range(5):  # each round the scope is 3,000 bytes more over its quota
        for _ in range(10):
            write_events(registered_node.port, name, b"x" * 292)
        stored.append(quotas.stored_round(segment_store())[sc])
        assert StreamCutRecord.objects.filter(stream=stream).count() <= 2
        if sel.get_stream(sc, "s").state == StreamState.TRUNCATING:
            run_truncate(segment_store(), stream.pk)  # (as the worker does)
    # cut back to 3,000 each round from the second on (the first records where to cut)
    assert stored == [3_000] * 5, stored
    assert sel.head_segments(stream)[sel.current_segments(stream)[0]] == 12_000
    assert AuditEntry.objects.filter(username="system:quota", object=f"{sc}/s").count() == 4
