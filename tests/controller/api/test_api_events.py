"""REST append: a batch of events with routing keys, durable when the answer comes.

Transactional test database: the writer asks the controller's tables from its own thread.
"""

from __future__ import annotations

import base64
import uuid

import pytest
from rest_framework.test import APIClient

from controller_app import selectors as sel
from controller_app.segment_client import segment_store
from controller_app.workflows import scopes, streams
from controller_app.workflows.config import StreamConfig
from millrace.client.events import EventSplitter
from millrace.client.routing import key_point
from millrace.client.transport.sync import SyncSegmentStoreClient
from millrace.kernel.claims import READ, mint_token
from tests.controller.conftest import TOKEN_SECRET

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stream(registered_node):
    sc = f"ev{uuid.uuid4().hex[:10]}"
    scopes.create_scope(sc)
    return streams.create_stream(segment_store(), sc, "st", StreamConfig(min_segments=2))


def _events_of(port: int, name: str) -> list[bytes]:
    token = mint_token(TOKEN_SECRET, "*", READ, 600)
    client = SyncSegmentStoreClient("127.0.0.1", port, delegation_token=token)
    try:
        data = client.read_segment(name, 0).data
    finally:
        client.close()
    return [e.data for e in EventSplitter(0).feed(0, data)]


def test_append_routes_by_key_in_order(api: APIClient, stream, registered_node) -> None:
    sc = stream.scope.name
    url = f"/v1/scopes/{sc}/streams/st/events"
    batch = [{"data": f"{key}:{i}", "routingKey": key} for i in range(50) for key in "abcd"]
    batch.append({"dataBase64": base64.b64encode(b"\x00\xffraw").decode(), "routingKey": "a"})
    response = api.post(url, {"events": batch}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json() == {"appended": 201}
    stored: dict[str, list[bytes]] = {}
    for segment in sel.current_segments(stream):
        name = sel.segment_name(stream, segment.id)
        for event in _events_of(registered_node.port, name):
            stored.setdefault(name, []).append(event)
    for key in "abcd":
        point = key_point(key)
        owner = next(
            sel.segment_name(stream, s.id)
            for s in sel.current_segments(stream)
            if s.key_start <= point < s.key_end
        )
        mine = [e for e in stored[owner] if e.startswith(f"{key}:".encode())]
        assert mine == [f"{key}:{i}".encode() for i in range(50)]
    assert any(b"\x00\xffraw" in events for events in stored.values())


@pytest.mark.parametrize(
    "body",
    [
        {"events": []},
        {"events": [{"routingKey": "a"}]},
        {"events": [{"data": "x", "dataBase64": "eA=="}]},
        {"events": [{"dataBase64": "not base64!"}]},
        {"events": "nope"},
    ],
)
def test_bad_batches_are_400_and_append_nothing(api: APIClient, stream, body) -> None:
    url = f"/v1/scopes/{stream.scope.name}/streams/st/events"
    response = api.post(url, body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["code"] == "invalid-argument"
    for segment in sel.current_segments(stream):
        assert segment_store().info(sel.segment_name(stream, segment.id)).length == 0


def test_append_to_a_sealed_stream_is_412(api: APIClient, stream) -> None:
    sc = stream.scope.name
    streams.seal_stream(sc, "st", wait=None)
    streams.run_seal(segment_store(), stream.pk)
    response = api.post(f"/v1/scopes/{sc}/streams/st/events", {"events": [{"data": "x"}]},
                        format="json")  # fmt: skip
    assert response.status_code == 412, response.json()
    assert response.json()["code"] == "stream-sealed"


def _pages(api: APIClient, url: str, limit: int, start: str = "head") -> tuple[list[dict], str]:
    """Every page from ``start`` until an empty one; the events and the last continuation."""
    events: list[dict] = []
    query = {"from": start, "limit": limit}
    while True:
        response = api.get(url, query)
        assert response.status_code == 200, response.json()
        page = response.json()
        assert len(page["events"]) <= limit
        events += page["events"]
        if not page["events"]:
            return events, page["continuation"]
        query = {"continuation": page["continuation"], "limit": limit}


def test_read_pages_with_continuations(api: APIClient, stream) -> None:
    sc = stream.scope.name
    url = f"/v1/scopes/{sc}/streams/st/events"
    batch = [{"data": f"{key}:{i}", "routingKey": key} for i in range(40) for key in "abcde"]
    batch.append({"dataBase64": base64.b64encode(b"\x00\xff").decode(), "routingKey": "a"})
    assert api.post(url, {"events": batch}, format="json").status_code == 201
    events, tail = _pages(api, url, limit=30)
    assert len(events) == 201
    texts = [e["data"] for e in events if "data" in e]
    for key in "abcde":
        assert [t for t in texts if t.startswith(f"{key}:")] == [f"{key}:{i}" for i in range(40)]
    raw = [e for e in events if "data" not in e]
    assert [base64.b64decode(e["dataBase64"]) for e in raw] == [b"\x00\xff"]
    # The continuation is a stream cut: later events come from there, and nothing else.
    more = [{"data": "late", "routingKey": "z"}]
    assert api.post(url, {"events": more}, format="json").status_code == 201
    later, _ = _pages(api, url, limit=5, start=tail)
    assert [e["data"] for e in later] == ["late"]
    from_tail = api.get(url, {"from": "tail"}).json()
    assert from_tail["events"] == [] and from_tail["endOfStream"] is False


@pytest.mark.parametrize(
    "query",
    [{"limit": "0"}, {"limit": "10001"}, {"limit": "x"}, {"from": "middle"},
     {"continuation": "mrcut1.@@@"}, {"from": "mrcut1.eyJ4IjoxfQ"}],
)  # fmt: skip
def test_bad_read_requests_are_refused_clearly(api: APIClient, stream, query) -> None:
    response = api.get(f"/v1/scopes/{stream.scope.name}/streams/st/events", query)
    assert response.status_code == 400, response.content
    assert response.json()["code"] in ("invalid-argument", "invalid-stream-cut")
