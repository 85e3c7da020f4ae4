"""Authorization matrix: every endpoint without credentials, with bad ones, and with valid ones.

Denied calls (401) must leave the database and the segment store exactly as they were: the
test takes a snapshot of every controller table, the users and tokens, and the segment store's
view of the stream's segments before the denied calls and compares it after them. Health
endpoints answer without credentials (and reveal nothing beyond health).
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from controller_app import selectors as sel
from controller_app.access.roles import grant
from controller_app.models import AuditEntry
from controller_app.segment_client import segment_store
from controller_app.workflows import reader_groups, scopes, streams, transactions
from controller_app.workflows.config import StreamConfig
from millrace.kernel.claims import READ

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(registered_node) -> dict[str, Any]:
    sc = f"sc{uuid.uuid4().hex[:12]}"
    scopes.create_scope(sc)
    stream = streams.create_stream(segment_store(), sc, "st", StreamConfig(min_segments=2))
    txn = transactions.create_transaction(segment_store(), sc, "st", lease_ms=60_000)
    rg_config = reader_groups.ReaderGroupConfig(streams={f"{sc}/st": "head"})
    reader_groups.create_reader_group(segment_store(), sc, "rg", rg_config)
    reader_groups.add_reader(sc, "rg", "r")
    user = get_user_model().objects.create_user("bob", password="correct-horse")
    grant(user, "operator")
    return {
        "sc": sc,
        "stream": stream,
        "segment": sel.current_segments(stream)[0].id,
        "txn": str(transactions.transaction_uuid(txn)),
        "token": Token.objects.create(user=user).key,
    }


def endpoints(w: dict[str, Any]) -> list[tuple[str, str, Any]]:
    sc, seg, txn = w["sc"], w["segment"], w["txn"]
    base = f"/v1/scopes/{sc}/streams/st"
    cut = {"streamCut": {str(seg): 0}}
    return [
        ("get", "/v1/scopes", None),
        ("post", "/v1/scopes", {"scopeName": "intruder"}),
        ("get", f"/v1/scopes/{sc}", None),
        ("delete", f"/v1/scopes/{sc}", None),
        ("get", f"/v1/scopes/{sc}/streams", None),
        ("post", f"/v1/scopes/{sc}/streams", {"streamName": "intruder"}),
        ("get", base, None),
        ("put", base, {"streamTags": ["pwned"]}),
        ("delete", base, None),
        ("put", f"{base}/state", {"streamState": "SEALED"}),
        ("get", f"{base}/scaling-events?from=0&to=1", None),
        ("get", f"/v1/scopes/{sc}/readergroups", None),
        ("get", f"/v1/scopes/{sc}/readergroups/rg", None),
        ("delete", f"/v1/scopes/{sc}/readergroups/rg", None),
        ("post", f"/v1/scopes/{sc}/readergroups", {"readerGroupName": "x", "streams": {}}),
        ("post", f"/v1/scopes/{sc}/readergroups/rg/reset", {}),
        ("post", f"/v1/scopes/{sc}/readergroups/rg/readers", {"readerId": "r"}),
        ("delete", f"/v1/scopes/{sc}/readergroups/rg/readers/r", None),
        ("post", f"/v1/scopes/{sc}/readergroups/rg/readers/r/sync", {"generation": 0}),
        ("post", f"/v1/scopes/{sc}/readergroups/rg/checkpoints", {"checkpointName": "c"}),
        ("get", f"/v1/scopes/{sc}/readergroups/rg/checkpoints/c", None),
        ("put", f"/v1/scopes/{sc}/readergroups/rg/subscriber-stream-cuts", {"streamCuts": {}}),
        ("get", f"{base}/info", None),
        ("get", f"{base}/segments", None),
        ("get", f"{base}/segments/{seg}", None),
        ("get", f"{base}/segments/{seg}/successors", None),
        ("get", f"{base}/segments/{seg}/uri", None),
        ("post", f"{base}/segments-between", {}),
        ("post", f"{base}/stream-cut/validity", cut),
        ("post", f"{base}/stream-cut/size", cut),
        ("post", f"{base}/stream-cut/next", {**cut, "approxBytes": 100}),
        ("post", f"{base}/scale", {"sealedSegments": [seg], "newRanges": [[0.0, 0.5]]}),
        ("post", f"{base}/truncate", cut),
        ("post", f"{base}/transactions", {"leaseMs": 10_000}),
        ("get", f"{base}/transactions/{txn}", None),
        ("post", f"{base}/transactions/{txn}/ping", {"leaseMs": 10_000}),
        ("post", f"{base}/transactions/{txn}/commit", {}),
        ("post", f"{base}/transactions/{txn}/abort", {}),
        ("post", f"{base}/writer-marks", {"writerId": "w", "timestamp": 1}),
        ("get", f"{base}/watermark", None),
        ("get", f"{base}/metrics", None),
        ("get", "/metrics", None),
        ("post", f"{base}/delegation-token", {}),
        ("post", f"{base}/events", {"events": [{"data": "intruder"}]}),
    ]


def snapshot(w: dict[str, Any]) -> dict[str, Any]:
    tables = {
        model._meta.label: sorted(map(repr, model.objects.values_list()))
        for model in apps.get_app_config("controller_app").get_models()
        if model is not AuditEntry  # a refusal is written there: that is the point of it
    }
    tables["users"] = sorted(map(repr, get_user_model().objects.values_list()))
    tables["tokens"] = sorted(map(repr, Token.objects.values_list()))
    stream = w["stream"]
    tables["segment store"] = [
        segment_store().info(sel.segment_name(stream, s.id))
        for s in sel.epoch_record(stream, 0).segment_list()
    ]
    return tables


CREDENTIALS = {
    "none": {},
    "bad token": {"HTTP_AUTHORIZATION": "Token 0123456789abcdef0123456789abcdef01234567"},
    "bad bearer": {"HTTP_AUTHORIZATION": "Bearer nope"},
    "malformed header": {"HTTP_AUTHORIZATION": "Token"},
    "bad password": {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(b"bob:wrong").decode()},
}


@pytest.mark.parametrize("kind", sorted(CREDENTIALS))
def test_denied_calls_change_nothing(world: dict[str, Any], kind: str, settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 1000  # (the sign-in limit has tests of its own)
    client = APIClient()
    client.credentials(**CREDENTIALS[kind])
    before = snapshot(world)
    for method, path, body in endpoints(world):
        response = getattr(client, method)(path, body, format="json")
        assert response.status_code == 401, (method, path, response.status_code)
        assert response.json()["code"] in ("not-authenticated", "authentication-failed")
        assert response.has_header("WWW-Authenticate")
    assert snapshot(world) == before
    refused = AuditEntry.objects.filter(result="refused", username="")
    assert refused.count() == len(endpoints(world))  # every refusal, reads too


@pytest.mark.parametrize("scheme", ["Token", "Bearer"])
def test_valid_credentials_are_let_in(world: dict[str, Any], scheme: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {world['token']}")
    for method, path, _body in endpoints(world):
        if method != "get":
            continue  # the writes are tested endpoint by endpoint in test_api*.py
        response = getattr(client, method)(path)
        assert response.status_code not in (401, 403), (path, response.json())


def test_health_needs_no_credentials(db: None) -> None:
    """Answered without credentials: 200, or 503 while a part is down (here no segment store is
    registered), never 401 or 403."""
    client = APIClient()
    for path in ("/health/liveness", "/v1/health/liveness", "/v1/health/readiness", "/health"):
        response = client.get(path)
        assert response.status_code in (200, 503), (path, response.status_code)
        assert response.json() is not None


# -- roles ---------------------------------------------------------------------------------------

#: Calls that change nothing although they are not GETs: a viewer may make them.
READS_BY_POST = (
    "segments-between", "stream-cut/validity", "stream-cut/size", "stream-cut/next",
    "delegation-token",
)  # fmt: skip


def _client_of(role: str | None) -> tuple[APIClient, str]:
    name = f"{role or 'nobody'}{uuid.uuid4().hex[:6]}"
    user = get_user_model().objects.create_user(name, password=None)
    if role:
        grant(user, role)  # type: ignore[arg-type]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client, name


def test_a_viewer_reads_and_is_refused_every_change_and_each_refusal_is_audited(
    world: dict[str, Any],
) -> None:
    client, name = _client_of("viewer")
    before = snapshot(world)
    refused = []
    for method, path, body in endpoints(world):
        response = getattr(client, method)(path, body, format="json")
        if method == "get" or path.endswith(READS_BY_POST):
            assert response.status_code not in (401, 403), (path, response.json())
            continue
        assert response.status_code == 403, (method, path, response.status_code)
        answer = response.json()
        assert answer["code"] == "permission-denied"
        assert re.fullmatch(
            r"(READ_UPDATE|MANAGE) on prn::/\S+ is not granted to you \(no grant, and this "
            r"needs the operator role or a stronger one\)",
            answer["message"],
        ), answer
        refused.append(path)
    assert snapshot(world) == before
    rows = AuditEntry.objects.filter(username=name).order_by("id")
    assert [r.result for r in rows] == ["refused"] * len(refused)
    assert all(r.source == "rest" and r.address == "127.0.0.1" for r in rows)
    scale = rows.get(action="stream.scale")
    assert scale.object == f"{world['sc']}/st"
    assert scale.detail == (
        f"permission-denied: READ_UPDATE on prn::/scope:{world['sc']}/stream:st is not granted "
        "to you (no grant, and this needs the operator role or a stronger one)"
    )


def test_a_user_without_a_role_may_not_even_read(world: dict[str, Any]) -> None:
    client, _ = _client_of(None)
    response = client.get("/v1/scopes")
    assert response.status_code == 403
    assert response.json()["message"] == (
        "you may see nothing here: no grant, and this needs the viewer role or a stronger one"
    )


def test_a_viewer_gets_a_read_only_delegation_token(world: dict[str, Any]) -> None:
    import jwt

    client, _ = _client_of("viewer")
    token = client.post(f"/v1/scopes/{world['sc']}/streams/st/delegation-token").json()["token"]
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["access"] == READ, claims


def test_an_operators_changes_are_audited_with_their_outcome(world: dict[str, Any]) -> None:
    client, name = _client_of("operator")
    assert client.post("/v1/scopes", {"scopeName": "made"}, format="json").status_code == 201
    assert client.post("/v1/scopes", {"scopeName": "made"}, format="json").status_code == 409
    rows = list(AuditEntry.objects.filter(username=name).order_by("id"))
    assert [(r.action, r.object, r.result) for r in rows] == [
        ("scope.create", "made", "ok"),
        ("scope.create", "made", "unchanged"),  # (asked again: nothing wrong, nothing done)
    ]
    assert rows[1].detail.startswith("already-exists: ")
    # data-plane calls (appends, reader syncs, pings) are not changes of the audit's kind
    base = f"/v1/scopes/{world['sc']}/streams/st"
    client.post(f"{base}/transactions/{world['txn']}/ping", {"leaseMs": 10_000}, format="json")
    assert AuditEntry.objects.filter(username=name).count() == 2


def test_an_admin_may_do_what_an_operator_may(world: dict[str, Any]) -> None:
    client, _ = _client_of("admin")
    assert client.post("/v1/scopes", {"scopeName": "byadmin"}, format="json").status_code == 201


def test_with_authentication_off_anyone_may_change(world: dict[str, Any], settings: Any) -> None:
    import dataclasses

    settings.MILLRACE = dataclasses.replace(settings.MILLRACE, auth_enabled=False)
    response = APIClient().post("/v1/scopes", {"scopeName": "open"}, format="json")
    assert response.status_code == 201
    assert AuditEntry.objects.get(action="scope.create").username == ""


# -- grants --------------------------------------------------------------------------------------


def _client_with_grants(*grants_given: tuple[str, str, bool]) -> tuple[APIClient, str]:
    """A user with no role and ``(permission, resource, deny)`` grants."""
    from controller_app.access import acl

    client, name = _client_of(None)
    for permission, resource, deny in grants_given:
        acl.grant(f"user:{name}", resource, permission, deny=deny, by="test",
                  audit_as=lambda *a: None)  # fmt: skip
    return client, name


def test_another_teams_user_is_refused_every_call_naming_the_resource(
    world: dict[str, Any],
) -> None:
    """Grants on another scope only: every call on this scope's objects is refused, naming
    the resource and the permission; listings answer without what it may not see."""
    client, name = _client_with_grants(("MANAGE", "prn::/scope:other*", False))
    before = snapshot(world)
    for method, path, body in endpoints(world):
        response = getattr(client, method)(path, body, format="json")
        if path in ("/v1/scopes", f"/v1/scopes/{world['sc']}/readergroups") and method == "get":
            assert response.status_code == 200, (path, response.json())
            assert world["sc"] not in json.dumps(response.json()) or path.endswith("groups")
            continue
        assert response.status_code == 403, (method, path, response.status_code)
        answer = response.json()
        assert answer["code"] == "permission-denied", answer
        assert re.fullmatch(r"(READ|READ_UPDATE|MANAGE) on prn::/\S* is not granted to you \(.*",
                            answer["message"]), answer  # fmt: skip
    assert snapshot(world) == before
    assert AuditEntry.objects.filter(username=name, result="refused").count() > 30


def test_a_teams_manager_may_do_everything_in_its_scopes(world: dict[str, Any]) -> None:
    client, _ = _client_with_grants(("MANAGE", f"prn::/scope:{world['sc'][:4]}*", False))
    for method, path, body in endpoints(world):
        if path in ("/metrics", "/v1/scopes") or path.endswith("/metrics"):
            continue  # (the cluster's: not the team's)
        response = getattr(client, method)(path, body, format="json")
        assert response.status_code not in (401, 403), (method, path, response.json())


def test_a_reader_needs_read_on_the_stream_and_read_update_on_its_group(
    world: dict[str, Any],
) -> None:
    """Pravega's trap avoided: READ on the stream and READ_UPDATE on the reader group are
    enough to join the group, sync positions and get a read token; nothing more is allowed."""
    import jwt

    sc = world["sc"]
    client, _ = _client_with_grants(
        ("READ", f"prn::/scope:{sc}/stream:st", False),
        ("READ_UPDATE", f"prn::/scope:{sc}/reader-group:rg", False),
    )
    group = f"/v1/scopes/{sc}/readergroups/rg"
    assert client.post(f"{group}/readers", {"readerId": "r2"}, format="json").status_code == 201
    sync = client.post(f"{group}/readers/r2/sync", {"generation": 0}, format="json")
    assert sync.status_code == 200, sync.json()
    token = client.post(f"/v1/scopes/{sc}/streams/st/delegation-token", {}, format="json")
    assert jwt.decode(token.json()["token"], options={"verify_signature": False})["access"] == READ
    refused = client.post(f"/v1/scopes/{sc}/streams/st/events", {"events": [{"data": "x"}]},
                          format="json")  # fmt: skip
    assert refused.status_code == 403
    assert refused.json()["message"].startswith(f"READ_UPDATE on prn::/scope:{sc}/stream:st ")


def test_a_denial_wins_over_a_wider_grant(world: dict[str, Any]) -> None:
    sc = world["sc"]
    client, _ = _client_with_grants(
        ("READ_UPDATE", f"prn::/scope:{sc}/*", False),
        ("READ_UPDATE", f"prn::/scope:{sc}/stream:st", True),
    )
    assert client.get(f"/v1/scopes/{sc}/streams/st").status_code == 200  # (only writes denied)
    answer = client.post(f"/v1/scopes/{sc}/streams/st/events", {"events": [{"data": "x"}]},
                         format="json")  # fmt: skip
    assert answer.status_code == 403
    assert "denied by grant" in answer.json()["message"]
    assert client.get(f"/v1/scopes/{sc}/readergroups/rg").status_code == 200
