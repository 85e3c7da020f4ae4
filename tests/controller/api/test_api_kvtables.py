"""Key-value tables over REST, as a program with a token calls them: create, list, get,
delete; entries put, get, listed with a prefix and a continuation token, changed only at the
version ``If-Match`` names, inserted only if absent; and a clear error for each bad request."""

from __future__ import annotations

import base64
import uuid

import pytest
from rest_framework.test import APIClient

from controller_app.models import AuditEntry, KeyValueTable
from tests.controller.api.answers import error, ok

pytestmark = pytest.mark.django_db


@pytest.fixture
def sc(api: APIClient, registered_node) -> str:
    name = f"sc{uuid.uuid4().hex[:12]}"
    assert api.post("/v1/scopes", {"scopeName": name}, format="json").status_code == 201
    return name


def _create(api: APIClient, sc: str, name: str = "users", **extra) -> dict:
    body = {"kvtName": name, "partitionCount": 3, "primaryKeyLength": 4, **extra}
    return ok(api.post(f"/v1/scopes/{sc}/kvtables", body, format="json"), 201)


def test_create_get_list_delete(api: APIClient, sc: str, registered_node) -> None:
    created = _create(api, sc, secondaryKeyLength=2)
    assert created["state"] == "ACTIVE" and created["partitionCount"] == 3
    assert [s["name"] for s in created["segments"]] == [
        f"{sc}/users_kvtable/{n}.#epoch.0" for n in range(3)
    ]
    got = ok(api.get(f"/v1/scopes/{sc}/kvtables/users"))
    assert {s["port"] for s in got["segments"]} == {registered_node.port}
    assert all(s["host"] == "127.0.0.1" and s["tls"] is False for s in got["segments"])
    listed = ok(api.get(f"/v1/scopes/{sc}/kvtables"))["kvtables"]
    assert [t["kvtName"] for t in listed] == ["users"]
    body = {"kvtName": "users", "partitionCount": 5, "primaryKeyLength": 4}
    error(api.post(f"/v1/scopes/{sc}/kvtables", body, format="json"), 409, "already-exists")
    error(api.delete(f"/v1/scopes/{sc}"), 412, "precondition-failed")  # the scope holds it
    ok(api.delete(f"/v1/scopes/{sc}/kvtables/users"), 204)
    error(api.get(f"/v1/scopes/{sc}/kvtables/users"), 404, "kvtable-not-found")
    assert not KeyValueTable.objects.filter(name="users", scope__name=sc).exists()
    actions = set(AuditEntry.objects.filter(object__startswith=f"{sc}/users").values_list(
        "action", flat=True))  # fmt: skip
    assert {"kvtable.create", "kvtable.delete"} <= actions


def test_entries_with_versions(api: APIClient, sc: str) -> None:
    _create(api, sc)
    base = f"/v1/scopes/{sc}/kvtables/users/entries"
    put = api.put(f"{base}/ab01", {"value": "first"}, format="json")
    first = ok(put)["version"]
    assert put["ETag"] == f'"{first}"'
    got = api.get(f"{base}/ab01")
    assert ok(got)["value"] == "first" and got["ETag"] == f'"{first}"'
    # conditional: the version read is the one that may be replaced
    second = ok(api.put(f"{base}/ab01", {"value": "second"}, format="json",
                         HTTP_IF_MATCH=f'"{first}"'))["version"]  # fmt: skip
    assert second > first
    error(api.put(f"{base}/ab01", {"value": "lost"}, format="json", HTTP_IF_MATCH=f'"{first}"'),
           412, "bad-key-version")  # fmt: skip
    error(api.put(f"{base}/ab01", {"value": "x"}, format="json", HTTP_IF_NONE_MATCH="*"),
           412, "bad-key-version")  # fmt: skip
    ok(api.put(f"{base}/ab02", b"\x00\xffraw", content_type="application/octet-stream",
                HTTP_IF_NONE_MATCH="*"))  # fmt: skip
    raw = ok(api.get(f"{base}/ab02"))
    assert raw["value"] is None and base64.b64decode(raw["valueBase64"]) == b"\x00\xffraw"
    error(api.delete(f"{base}/ab01", HTTP_IF_MATCH=f'"{first}"'), 412, "bad-key-version")
    ok(api.delete(f"{base}/ab01", HTTP_IF_MATCH=f'"{second}"'), 204)
    error(api.get(f"{base}/ab01"), 404, "key-not-found")
    error(api.delete(f"{base}/ab01", HTTP_IF_MATCH=f'"{second}"'), 404, "key-not-found")
    ok(api.delete(f"{base}/ab01"), 204)  # unconditional: absent is fine


def test_entries_listed_by_page_and_prefix(api: APIClient, sc: str) -> None:
    _create(api, sc)
    base = f"/v1/scopes/{sc}/kvtables/users/entries"
    keys = [f"{p}{n:03d}" for p in "ab" for n in range(25)]
    for key in keys:
        ok(api.put(f"{base}/{key}", {"value": key.upper()}, format="json"))
    seen, token, pages = [], "", 0
    while True:
        page = ok(api.get(base, {"limit": 7, "continuationToken": token}))
        assert len(page["entries"]) <= 7
        seen += [e["key"] for e in page["entries"]]
        token, pages = page["continuationToken"], pages + 1
        if not token:
            break
    assert sorted(seen) == keys and len(seen) == len(set(seen)) and pages >= 8
    prefixed = ok(api.get(base, {"prefix": "b0", "limit": 1000}))
    assert sorted(e["key"] for e in prefixed["entries"]) == [k for k in keys if k[:2] == "b0"]
    assert all(e["value"] == e["key"].upper() for e in prefixed["entries"])
    encoded = base64.urlsafe_b64encode(b"a001").decode()
    assert ok(api.get(f"{base}/{encoded}", {"keyEncoding": "base64"}))["value"] == "A001"


def test_bad_requests_get_clear_errors(api: APIClient, sc: str) -> None:
    for body, word in (
        ({"kvtName": "t", "partitionCount": 0, "primaryKeyLength": 4}, "partitionCount"),
        ({"kvtName": "t", "partitionCount": 1, "primaryKeyLength": 0}, "primaryKeyLength"),
        ({"kvtName": "bad name", "partitionCount": 1, "primaryKeyLength": 4}, "name"),
        ({"kvtName": "_t", "partitionCount": 1, "primaryKeyLength": 4}, "'_'"),
        ({"kvtName": 5, "partitionCount": 1, "primaryKeyLength": 4}, "string"),
        ({"kvtName": "t", "partitionCount": 1, "primaryKeyLength": 8000,
          "secondaryKeyLength": 500}, "8192"),
    ):  # fmt: skip
        message = error(api.post(f"/v1/scopes/{sc}/kvtables", body, format="json"), 400,
                         "invalid-argument")  # fmt: skip
        assert word in message, message
    error(api.get("/v1/scopes/nope/kvtables/t"), 404, "scope-not-found")
    _create(api, sc)
    base = f"/v1/scopes/{sc}/kvtables/users/entries"
    assert "4 bytes" in error(api.put(f"{base}/toolong", {"value": "v"}, format="json"), 400,
                                "invalid-argument")  # fmt: skip
    error(api.put(f"{base}/abcd", {"value": "v", "valueBase64": "dg=="}, format="json"), 400,
           "invalid-argument")  # fmt: skip
    error(api.put(f"{base}/abcd", {"valueBase64": "%%%"}, format="json"), 400,
           "invalid-argument")  # fmt: skip
    error(api.put(f"{base}/abcd", {"value": "v"}, format="json", HTTP_IF_MATCH="*"), 400,
           "invalid-argument")  # fmt: skip
    error(api.get(base, {"limit": "0"}), 400, "invalid-argument")
    error(api.get(base, {"continuationToken": "zz"}), 400, "invalid-argument")
    error(api.get(f"{base}/abcd", {"keyEncoding": "base64"}), 400, "invalid-argument")
    ok(api.put(f"{base}/abcd", {"value": "still serving"}, format="json"))
