"""The REST API through Django's test client: responses, stored state, errors, query budgets.

Endpoints whose workflow runs inline (scopes, create, update, reads, transactions' requests)
are tested here against a real segment store node; the ones that wait for the Celery worker
(seal, delete, scale, truncate, commit) are in ``test_api_worker.py`` with a real worker.
"""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from controller_app import selectors as sel
from controller_app.choices import StreamState, TxnState
from controller_app.models import AuditEntry, Scope, Stream, Transaction
from controller_app.segment_client import segment_store
from tests.controller import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def sc() -> str:
    return f"sc{uuid.uuid4().hex[:12]}"


@pytest.fixture
def stream(api: APIClient, registered_node, sc: str) -> Stream:
    assert api.post("/v1/scopes", {"scopeName": sc}, format="json").status_code == 201
    body = {
        "streamName": "st",
        "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2},
        "streamTags": ["blue", "green"],
    }
    response = api.post(f"/v1/scopes/{sc}/streams", body, format="json")
    assert response.status_code == 201, response.json()
    return sel.get_stream(sc, "st")


def _error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code and body["message"], body
    return body


# -- scopes ------------------------------------------------------------------------------------


def test_scopes(api: APIClient, sc: str) -> None:
    assert api.post("/v1/scopes", {"scopeName": sc}, format="json").json() == {"scopeName": sc}
    assert Scope.objects.filter(name=sc).exists()
    assert {"scopeName": sc} in api.get("/v1/scopes").json()["scopes"]
    assert api.get(f"/v1/scopes/{sc}").json() == {"scopeName": sc}
    _error(api.post("/v1/scopes", {"scopeName": sc}, format="json"), 409, "already-exists")
    _error(
        api.post("/v1/scopes", {"scopeName": "bad name"}, format="json"), 400, "invalid-argument"
    )
    # In the audit log a create asked again (Pravega's clients do: createScope is idempotent)
    # is "unchanged", not "failed"; a bad request is still a failure.
    results = list(
        AuditEntry.objects.filter(action="scope.create")
        .order_by("pk")
        .values_list("result", flat=True)
    )
    assert results[-3:] == ["ok", "unchanged", "failed"]
    _error(api.post("/v1/scopes", {}, format="json"), 400, "invalid-argument")
    _error(api.get("/v1/scopes/nosuch"), 404, "scope-not-found")
    assert api.delete(f"/v1/scopes/{sc}").status_code == 204
    assert not Scope.objects.filter(name=sc).exists()
    _error(api.delete(f"/v1/scopes/{sc}"), 404, "scope-not-found")


def test_delete_of_a_scope_with_streams_is_412(api: APIClient, stream: Stream, sc: str) -> None:
    _error(api.delete(f"/v1/scopes/{sc}"), 412, "precondition-failed")
    assert Scope.objects.filter(name=sc).exists()


def test_malformed_json_and_unknown_paths_are_json_errors(api: APIClient) -> None:
    response = api.post("/v1/scopes", data="{not json", content_type="application/json")
    _error(response, 400, "malformed-request")
    _error(api.get("/v1/nosuch/path"), 404, "not-found")
    _error(api.patch("/v1/scopes", {}, format="json"), 405, "method-not-allowed")


# -- streams -----------------------------------------------------------------------------------


def test_create_and_get_stream(api: APIClient, stream: Stream, sc: str) -> None:
    expected = {
        "scopeName": sc,
        "streamName": "st",
        "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2},
        "retentionPolicy": None,
        "tags": ["blue", "green"],
        "timestampAggregationTimeout": 0,
        "rolloverSizeBytes": 0,
    }
    assert api.get(f"/v1/scopes/{sc}/streams/st").json() == expected
    assert stream.state == StreamState.ACTIVE
    assert len(sel.current_segments(stream)) == 2
    for segment in sel.current_segments(stream):
        assert segment_store().info(sel.segment_name(stream, segment.id)).exists
    body = {"streamName": "st", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2}}
    _error(api.post(f"/v1/scopes/{sc}/streams", body, format="json"), 409, "already-exists")
    _error(api.post("/v1/scopes/nosuch/streams", body, format="json"), 404, "scope-not-found")
    _error(api.get(f"/v1/scopes/{sc}/streams/nosuch"), 404, "stream-not-found")
    bad = {"streamName": "x", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 0}}
    _error(api.post(f"/v1/scopes/{sc}/streams", bad, format="json"), 400, "invalid-argument")


def test_retention_units_convert_as_pravega_does(api: APIClient, stream: Stream, sc: str) -> None:
    body = {
        "scalingPolicy": {"type": "BY_RATE_IN_KBYTES_PER_SEC", "targetRate": 100,
                          "scaleFactor": 2, "minSegments": 2},
        "retentionPolicy": {"type": "LIMITED_DAYS", "value": 0,
                            "timeBasedRetention": {"days": 1, "hours": 2, "minutes": 3}},
        "streamTags": ["red"],
    }  # fmt: skip
    response = api.put(f"/v1/scopes/{sc}/streams/st", body, format="json")
    assert response.status_code == 200, response.json()
    stored = Stream.objects.get(pk=stream.pk)
    assert stored.retention_value == (26 * 60 + 3) * 60_000
    assert response.json()["retentionPolicy"] == {
        "type": "LIMITED_DAYS", "value": 0, "maxValue": 0,
        "timeBasedRetention": {"days": 1, "hours": 2, "minutes": 3},
    }  # fmt: skip
    assert response.json()["tags"] == ["red"]
    assert response.json()["scalingPolicy"]["targetRate"] == 100
    size = {"retentionPolicy": {"type": "LIMITED_SIZE_MB", "value": 5}}
    assert api.put(f"/v1/scopes/{sc}/streams/st", size, format="json").status_code == 200
    stored.refresh_from_db()
    assert (stored.retention_type, stored.retention_value) == ("SIZE", 5 * 1024 * 1024)


def test_list_streams_filters_and_budget(api: APIClient, stream: Stream, sc: str) -> None:
    scope = Scope.objects.get(name=sc)
    for i in range(5):
        f.StreamFactory(scope=scope, name=f"more-{i}")
    f.StreamFactory(scope=scope, name="_internal")
    with CaptureQueriesContext(connection) as queries:
        listed = api.get(f"/v1/scopes/{sc}/streams").json()["streams"]
    assert len(queries) <= 7  # auth, grants, scope, streams, tags (+ session bookkeeping)
    assert sorted(x["streamName"] for x in listed) == ["more-0", "more-1", "more-2", "more-3",
                                                       "more-4", "st"]  # fmt: skip
    internal = api.get(f"/v1/scopes/{sc}/streams?filter_type=showInternalStreams").json()
    assert [x["streamName"] for x in internal["streams"]] == ["_internal"]
    tagged = api.get(f"/v1/scopes/{sc}/streams?filter_type=tag&filter_value=blue").json()
    assert [x["streamName"] for x in tagged["streams"]] == ["st"]
    _error(api.get(f"/v1/scopes/{sc}/streams?filter_type=what"), 400, "invalid-argument")


def test_scaling_events_and_segment_queries(api: APIClient, stream: Stream, sc: str) -> None:
    base = f"/v1/scopes/{sc}/streams/st"
    events = api.get(f"{base}/scaling-events?from=0&to=9999999999999").json()["scalingEvents"]
    assert len(events) == 1 and len(events[0]["segmentList"]) == 2
    _error(api.get(f"{base}/scaling-events?from=5"), 400, "invalid-argument")
    _error(api.get(f"{base}/scaling-events?from=9&to=1"), 400, "invalid-argument")
    current = api.get(f"{base}/segments").json()["segments"]
    assert [(x["keyStart"], x["keyEnd"]) for x in current] == [(0.0, 0.5), (0.5, 1.0)]
    head = api.get(f"{base}/segments?at=head").json()["segments"]
    assert [x["offset"] for x in head] == [0, 0]
    first = current[0]["segmentId"]
    assert api.get(f"{base}/segments/{first}/successors").json() == {"successors": []}
    detail = api.get(f"{base}/segments/{first}").json()
    assert (detail["exists"], detail["sealed"], detail["length"], detail["sealedSize"]) == (
        True, False, 0, None)  # fmt: skip
    uri = api.get(f"{base}/segments/{first}/uri").json()
    assert (uri["host"], uri["segment"]) == ("127.0.0.1", f"{sc}/st/0.#epoch.0")
    _error(api.get(f"{base}/segments/99999/uri"), 404, "segment-not-found")
    _error(api.get(f"{base}/segments/99999999999999999999/uri"), 404, "not-found")
    cut = {str(x["segmentId"]): 0 for x in current}
    assert api.post(f"{base}/stream-cut/validity", {"streamCut": cut}, format="json").json() == {
        "valid": True, "message": ""}  # fmt: skip
    half = {str(first): 0}
    validity = api.post(f"{base}/stream-cut/validity", {"streamCut": half}, format="json").json()
    assert validity["valid"] is False and "not a stream cut" in validity["message"]
    assert api.post(f"{base}/stream-cut/size", {"streamCut": cut}, format="json").json() == {
        "size": 0}  # fmt: skip
    between = api.post(f"{base}/segments-between", {}, format="json").json()["segments"]
    assert len(between) == 2
    info = api.get(f"{base}/info").json()
    assert (info["state"], info["currentEpoch"]) == ("ACTIVE", 0)
    _error(api.post(f"{base}/stream-cut/size", {"streamCut": {"x": 1}}, format="json"), 400,
           "invalid-argument")  # fmt: skip


def test_transaction_requests(api: APIClient, stream: Stream, sc: str) -> None:
    base = f"/v1/scopes/{sc}/streams/st/transactions"
    created = api.post(base, {"leaseMs": 10_000, "writerId": "w"}, format="json")
    assert created.status_code == 201, created.json()
    txn = created.json()
    assert txn["state"] == "OPEN" and txn["epoch"] == 0 and len(txn["segments"]) == 2
    assert all(segment_store().info(name).exists for name in txn["segments"])
    assert api.get(f"{base}/{txn['txnId']}").json()["state"] == "OPEN"
    ping = api.post(f"{base}/{txn['txnId']}/ping", {"leaseMs": 20_000}, format="json")
    assert ping.status_code == 200
    assert api.post(f"{base}/{txn['txnId']}/abort", {}, format="json").json()["state"] == "ABORTING"
    assert Transaction.objects.get().state == TxnState.ABORTING
    _error(api.get(f"{base}/not-a-uuid"), 400, "invalid-argument")
    _error(api.get(f"{base}/{uuid.uuid4()}"), 404, "transaction-not-found")
    _error(api.post(base, {"leaseMs": 5}, format="json"), 400, "invalid-argument")


def test_writer_marks(api: APIClient, stream: Stream, sc: str) -> None:
    first = sel.current_segments(stream)[0].id
    body = {"writerId": "w1", "timestamp": 1000, "position": {str(first): 10}}
    url = f"/v1/scopes/{sc}/streams/st/writer-marks"
    assert api.post(url, body, format="json").json() == {"writerId": "w1", "timestamp": 1000}
    older = dict(body, timestamp=500)
    assert api.post(url, older, format="json").json()["timestamp"] == 1000  # never goes back
    _error(api.post(url, {"writerId": "w1"}, format="json"), 400, "invalid-argument")


def test_watermark(api: APIClient, stream: Stream, sc: str) -> None:
    """GET .../watermark: 404 no-watermark until the watermark round made one."""
    from controller_app.workflows import marks

    url = f"/v1/scopes/{sc}/streams/st/watermark"
    _error(api.get(url), 404, "no-watermark")
    _error(api.get(f"/v1/scopes/{sc}/streams/nosuch/watermark"), 404, "stream-not-found")
    cut = {str(s.id): 0 for s in sel.current_segments(stream)}
    api.post(f"/v1/scopes/{sc}/streams/st/writer-marks",
             {"writerId": "w", "timestamp": 1234, "position": cut}, format="json")  # fmt: skip
    marks.compute_watermark(stream)
    assert api.get(url).json() == {
        "number": 1, "lowerTimeBound": 1234, "upperTimeBound": 1234, "streamCut": cut,
    }  # fmt: skip


def test_stream_metrics_and_prometheus(api: APIClient, stream: Stream, sc: str) -> None:
    """GET .../metrics: each current segment's rates (0 with no monitor to ask); GET /metrics:
    Prometheus text with the metadata's numbers and django-prometheus's own."""
    found = api.get(f"/v1/scopes/{sc}/streams/st/metrics").json()
    names = [s["name"] for s in found["segments"]]
    assert names == [sel.segment_name(stream, s.id) for s in sel.current_segments(stream)]
    assert found["eventsPerSecond"] == 0.0
    from controller_app import tasks

    tasks._count("millrace.scale_stream", "ok")
    tasks._count("millrace.scale_stream", "ok")
    text = api.get("/metrics").content.decode()
    assert 'millrace_workflow_tasks_total{outcome="ok",task="millrace.scale_stream"} 2.0' in text
    assert 'millrace_streams{state="ACTIVE"} 1.0' in text
    assert "millrace_truncations_total 0.0" in text
    assert "django_http_requests_total_by_method_total" in text


def test_delegation_token_lives_as_configured(
    api: APIClient, stream: Stream, sc: str, settings
) -> None:
    """POST .../delegation-token: a token for the stream's segments, valid ``expiresIn``
    seconds = MILLRACE_TOKEN_TTL_SECONDS (the JWT's own expiry says the same)."""
    import dataclasses

    import jwt

    settings.MILLRACE = dataclasses.replace(
        settings.MILLRACE, auth_enabled=True, token_ttl_seconds=45
    )
    answer = api.post(f"/v1/scopes/{sc}/streams/st/delegation-token").json()
    assert answer["expiresIn"] == 45
    claims = jwt.decode(answer["token"], options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 45
    assert claims["resource"] == f"{sc}/st/"


# -- schema binding --------------------------------------------------------------------------


def test_a_streams_schema_binding_is_set_checked_and_audited(
    api: APIClient, stream: Stream, sc: str
) -> None:
    path = f"/v1/scopes/{sc}/streams/st/schema"
    assert api.get(path).json() == {
        "subject": f"{sc}.st-value", "defaultSubject": True, "enforcement": "none"}  # fmt: skip
    answer = api.put(path, {"subject": "orders-value", "enforcement": "header"}, format="json")
    assert answer.json() == {
        "subject": "orders-value", "defaultSubject": False, "enforcement": "header"}  # fmt: skip
    # naming the default subject is the default again
    answer = api.put(path, {"subject": f"{sc}.st-value"}, format="json")
    assert answer.json()["defaultSubject"] is True and answer.json()["enforcement"] == "header"
    _error(api.put(path, {"enforcement": "strict"}, format="json"), 400, "invalid-argument")
    _error(api.put(path, {"subject": "x" * 256}, format="json"), 400, "invalid-argument")
    _error(api.get(f"/v1/scopes/{sc}/streams/nosuch/schema"), 404, "stream-not-found")
    actions = AuditEntry.objects.filter(action="stream.schema").order_by("pk")
    assert list(actions.values_list("result", flat=True))[-4:] == ["ok", "ok", "failed", "failed"]
    body = {"streamName": "typed", "schema": {"enforcement": "validate"}}
    assert api.post(f"/v1/scopes/{sc}/streams", body, format="json").status_code == 201
    assert api.get(f"/v1/scopes/{sc}/streams/typed/schema").json()["enforcement"] == "validate"
