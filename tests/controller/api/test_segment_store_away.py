"""REST calls that need the segment store while it is away: 503 with ``Retry-After``, never 500.

A segment store node of this test's own is registered, a stream created on it, then the node
is killed with SIGKILL: creating a stream or a key-value table, appending, reading and a table's
entries answer 503 ``{code, message}`` with ``Retry-After`` and change nothing (an append
given up is not delivered later either); the Python
client's controller calls wait through the 503s. Once a node serves the data directory again,
the same calls succeed.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from controller_app import segment_client
from controller_app.access.roles import grant
from controller_app.cluster import membership
from controller_app.models import Stream
from millrace.client.controller import AsyncControllerClient, ControllerError
from tests.controller.conftest import CONTAINERS, NodeProcess

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_node(tmp_path: Path, db: None, segment_store_node: NodeProcess) -> Iterator[NodeProcess]:
    """A node of this test alone (the session node sets the shared token secret)."""
    node = NodeProcess(tmp_path / "store")
    membership.register_node(host="127.0.0.1", port=node.port, container_count=CONTAINERS)
    yield node
    node.stop()
    segment_client.segment_store().close()


def assert_unavailable(response: Any) -> None:
    assert response.status_code == 503, response.content
    body = response.json()
    assert body["code"] in ("segment-store-unavailable", "segment-store-timeout"), body
    assert body["message"]
    assert int(response["Retry-After"]) > 0


def test_a_segment_store_away_is_503_with_retry_after(
    api: APIClient, own_node: NodeProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("controller_app.event_writers.APPEND_TIMEOUT_SECONDS", 2.0)
    sc = f"sc{uuid.uuid4().hex[:10]}"
    assert api.post("/v1/scopes", {"scopeName": sc}, format="json").status_code == 201
    body = {"streamName": "st", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1}}
    assert api.post(f"/v1/scopes/{sc}/streams", body, format="json").status_code == 201
    events = {"events": [{"data": "e1", "routingKey": "k"}]}
    assert api.post(f"/v1/scopes/{sc}/streams/st/events", events, format="json").status_code == 201
    table = {"kvtName": "kv", "partitionCount": 2, "primaryKeyLength": 2}
    assert api.post(f"/v1/scopes/{sc}/kvtables", table, format="json").status_code == 201
    entry = f"/v1/scopes/{sc}/kvtables/kv/entries/k1"
    assert api.put(entry, {"value": "v1"}, format="json").status_code == 200

    own_node.stop()
    other = {"streamName": "other", "scalingPolicy": body["scalingPolicy"]}
    assert_unavailable(api.post(f"/v1/scopes/{sc}/streams", other, format="json"))
    assert not Stream.objects.filter(scope__name=sc, name="other", state="ACTIVE").exists()
    assert_unavailable(api.post(f"/v1/scopes/{sc}/streams/st/events", events, format="json"))
    assert_unavailable(api.get(f"/v1/scopes/{sc}/streams/st/events?from=head"))
    assert_unavailable(api.get(entry))
    assert_unavailable(api.put(entry, {"value": "v2"}, format="json"))
    assert_unavailable(api.get(f"/v1/scopes/{sc}/kvtables/kv/entries"))
    other_table = {**table, "kvtName": "kv2"}
    assert_unavailable(api.post(f"/v1/scopes/{sc}/kvtables", other_table, format="json"))

    back = NodeProcess(tmp_path / "store")  # the same data: a restarted segment store
    try:
        membership.register_node(host="127.0.0.1", port=back.port, container_count=CONTAINERS)
        assert api.get(entry).json()["value"] == "v1"  # nothing changed while it was away
        # The append answered 503 was given up, not delivered once the node came back: a
        # client sending it again (here e2) does not get it twice.
        again = {"events": [{"data": "e2", "routingKey": "k"}]}
        assert (
            api.post(f"/v1/scopes/{sc}/streams/st/events", again, format="json").status_code == 201
        )
        page = api.get(f"/v1/scopes/{sc}/streams/st/events?from=head").json()
        assert [e["data"] for e in page["events"]] in (["e1", "e2"], ["ZTE=", "ZTI="])
        assert api.post(f"/v1/scopes/{sc}/streams", other, format="json").status_code == 201
    finally:
        back.stop()


def test_the_client_waits_through_503s(live_server: Any, own_node: NodeProcess) -> None:
    """``AsyncControllerClient.call`` retries a 503 until the segment store is back."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.create_user(f"u{uuid.uuid4().hex[:8]}", password=None)
    grant(user, "operator")
    token = Token.objects.create(user=user).key
    sc = f"sc{uuid.uuid4().hex[:10]}"
    own_node.stop()
    came_back = threading.Event()

    def restart() -> None:  # what the supervisor does: the node is back a little later
        node = NodeProcess(own_node.log.with_suffix(""))
        membership.register_node(host="127.0.0.1", port=node.port, container_count=CONTAINERS)
        own_node.process = node.process
        came_back.set()

    async def create() -> Any:
        client = AsyncControllerClient(live_server.url, token)
        try:
            await client.create_scope(sc)
            timer = threading.Timer(2.0, restart)
            timer.start()
            return await client.call(
                "POST", f"/scopes/{sc}/streams",
                {"streamName": "st", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS",
                                                       "minSegments": 1}},
            )  # fmt: skip
        finally:
            await client.close()

    try:
        created = asyncio.run(create())
    except ControllerError as exc:  # pragma: no cover - shows what went wrong
        pytest.fail(f"the call did not ride through: {exc}")
    assert came_back.is_set() and created["streamName"] == "st"
