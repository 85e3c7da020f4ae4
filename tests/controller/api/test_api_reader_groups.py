"""Reader groups over REST: create, readers joining and syncing, balancing, checkpoints,
reset, leaving, dead readers, subscriber cuts, and clear errors for bad requests."""

from __future__ import annotations

import time
import uuid

import pytest
from rest_framework.test import APIClient

from controller_app import selectors as sel
from controller_app.models import ReaderGroup, Subscriber
from millrace.client.streamcut import StreamCut
from tests.controller.api.answers import error, ok

pytestmark = pytest.mark.django_db


@pytest.fixture
def sc(api: APIClient, registered_node) -> str:
    name = f"sc{uuid.uuid4().hex[:12]}"
    assert api.post("/v1/scopes", {"scopeName": name}, format="json").status_code == 201
    body = {"streamName": "st", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 4}}
    assert api.post(f"/v1/scopes/{name}/streams", body, format="json").status_code == 201
    return name


def _create(api: APIClient, sc: str, **extra) -> dict:
    body = {"readerGroupName": "rg", "streams": {f"{sc}/st": "head"}, **extra}
    return ok(api.post(f"/v1/scopes/{sc}/readergroups", body, format="json"), 201)


def _sync(api: APIClient, sc: str, reader: str, **body) -> dict:
    body.setdefault("generation", 0)
    path = f"/v1/scopes/{sc}/readergroups/rg/readers/{reader}/sync"
    return ok(api.post(path, body, format="json"))


def test_create_get_list_delete(api: APIClient, sc: str) -> None:
    created = _create(api, sc)
    assert created["streamList"] == [f"{sc}/st"] and created["generation"] == 0
    assert len(created["unassignedSegments"]) == 4
    assert _create(api, sc) == created  # the same create again
    other = {"readerGroupName": "rg", "streams": {f"{sc}/st": "tail"}}
    error(api.post(f"/v1/scopes/{sc}/readergroups", other, format="json"), 409, "already-exists")
    assert ok(api.get(f"/v1/scopes/{sc}/readergroups")) == {
        "readerGroups": [{"readerGroupName": "rg"}]
    }
    assert ok(api.delete(f"/v1/scopes/{sc}/readergroups/rg"), 204) == {}
    assert not ReaderGroup.objects.filter(name="rg", scope__name=sc).exists()


def test_two_readers_share_the_segments_and_get_where_to_read(
    api: APIClient, sc: str, registered_node
) -> None:
    _create(api, sc)
    base = f"/v1/scopes/{sc}/readergroups/rg"
    joined = ok(api.post(f"{base}/readers", {"readerId": "a"}, format="json"), 201)
    assert joined["generation"] == 0 and joined["groupRefreshTimeMs"] == 1000
    first = _sync(api, sc, "a")
    assert len(first["acquired"]) == 4
    where = first["acquired"][0]
    assert where["port"] == registered_node.port and where["offset"] == 0
    assert where["segment"].startswith(f"{sc}/st/")
    ok(api.post(f"{base}/readers", {"readerId": "b"}, format="json"), 201)
    assert _sync(api, sc, "b")["acquired"] == []
    asked = _sync(api, sc, "a", positions={where["key"]: 30})
    assert asked["release"] == 2
    give = {k: 0 for k in asked["assigned"][:2]}
    _sync(api, sc, "a", released=give)
    taken = _sync(api, sc, "b")["acquired"]
    assert sorted(x["key"] for x in taken) == sorted(give)
    detail = ok(api.get(base))
    assert detail["onlineReaderIds"] == ["a", "b"]
    assert sorted(len(r["segments"]) for r in detail["readers"]) == [2, 2]


def test_segments_whose_answer_was_lost_are_given_again(api: APIClient, sc: str) -> None:
    """The controller commits a sync, then its answer is lost (the database failed before the
    reply was made, or the connection did): the reader asks again without those segments in
    its positions, and gets them again rather than never reading them."""
    _create(api, sc)
    base = f"/v1/scopes/{sc}/readergroups/rg"
    ok(api.post(f"{base}/readers", {"readerId": "a"}, format="json"), 201)
    first = _sync(api, sc, "a")["acquired"]
    assert len(first) == 4
    again = _sync(api, sc, "a")["acquired"]  # (the same request: the first answer never came)
    assert sorted(again, key=lambda x: x["key"]) == sorted(first, key=lambda x: x["key"])
    positions = {x["key"]: 5 for x in again}
    assert _sync(api, sc, "a", positions=positions)["acquired"] == []  # reported: held
    dropped, *kept = positions
    lost = _sync(api, sc, "a", positions={key: 5 for key in kept})["acquired"]
    assert [(x["key"], x["offset"]) for x in lost] == [(dropped, 5)]


def test_checkpoint_gives_a_valid_stream_cut(api: APIClient, sc: str) -> None:
    _create(api, sc)
    base = f"/v1/scopes/{sc}/readergroups/rg"
    for reader in "ab":
        ok(api.post(f"{base}/readers", {"readerId": reader}, format="json"), 201)
    held = {r: _sync(api, sc, r)["acquired"] for r in "ab"}
    status = ok(api.post(f"{base}/checkpoints", {"checkpointName": "c1"}, format="json"), 202)
    assert status == {
        "checkpointName": "c1", "complete": False, "pendingReaders": ["a", "b"], "streamCuts": {}
    }  # fmt: skip
    answer = _sync(api, sc, "a")
    assert answer["checkpoint"] == "c1"
    mine = {x["key"]: 0 for x in held["a"]}
    _sync(api, sc, "a", checkpoint="c1", checkpointPositions=mine)
    assert ok(api.get(f"{base}/checkpoints/c1"))["pendingReaders"] == ["b"]
    _sync(api, sc, "b", checkpoint="c1")
    done = ok(api.get(f"{base}/checkpoints/c1"))
    assert done["complete"] is True
    cut = {int(k): v for k, v in done["streamCuts"][f"{sc}/st"].items()}
    assert sel.is_stream_cut_valid(sel.get_stream(sc, "st"), cut)
    error(api.get(f"{base}/checkpoints/nosuch"), 404, "not-found")


def test_reset_starts_a_new_generation_at_a_stream_cut(api: APIClient, sc: str) -> None:
    _create(api, sc)
    base = f"/v1/scopes/{sc}/readergroups/rg"
    ok(api.post(f"{base}/readers", {"readerId": "a"}, format="json"), 201)
    _sync(api, sc, "a")
    stream = sel.get_stream(sc, "st")
    head = {s.id: 0 for s in sel.head_segments(stream)}
    text = StreamCut(sc, "st", head).to_text()
    reset = ok(api.post(f"{base}/reset", {"streams": {f"{sc}/st": text}}, format="json"))
    assert reset["generation"] == 1 and len(reset["unassignedSegments"]) == 4
    assert _sync(api, sc, "a") == {"generation": 1, "reinitialize": True}
    assert len(_sync(api, sc, "a", generation=1)["acquired"]) == 4


def test_a_reader_that_stops_syncing_is_declared_dead(api: APIClient, sc: str) -> None:
    _create(api, sc, readerTimeoutMs=2000)
    base = f"/v1/scopes/{sc}/readergroups/rg"
    for reader in "ab":
        ok(api.post(f"{base}/readers", {"readerId": reader}, format="json"), 201)
    a_held = _sync(api, sc, "a")["acquired"]
    _sync(api, sc, "a", positions={a_held[0]["key"]: 77})
    a_synced = time.monotonic()
    time.sleep(0.5)
    assert len(_sync(api, sc, "b")["acquired"]) == 2  # the rest; a is not dead yet
    time.sleep(max(0.0, a_synced + 1.5 - time.monotonic()))
    _sync(api, sc, "b")  # (b keeps alive: under load, its first sync could be 2 s old by now)
    assert time.monotonic() - a_synced < 2.0, "too slow to tell: b synced after a's timeout"
    time.sleep(max(0.0, a_synced + 2.2 - time.monotonic()))
    taken = _sync(api, sc, "b")["acquired"]
    assert {x["key"]: x["offset"] for x in taken}[a_held[0]["key"]] == 77
    message = error(
        api.post(f"{base}/readers/a/sync", {"generation": 0}, format="json"),
        410,
        "reader-not-in-group",
    )
    assert "join again" in message


def test_leaving_hands_segments_back_at_the_given_positions(api: APIClient, sc: str) -> None:
    _create(api, sc)
    base = f"/v1/scopes/{sc}/readergroups/rg"
    ok(api.post(f"{base}/readers", {"readerId": "a"}, format="json"), 201)
    key = _sync(api, sc, "a")["acquired"][0]["key"]
    ok(api.delete(f"{base}/readers/a", {"positions": {key: 12}}, format="json"), 204)
    ok(api.delete(f"{base}/readers/a", format="json"), 204)  # again: harmless
    assert ok(api.get(base))["unassignedSegments"][key] == 12


def test_subscriber_cuts(api: APIClient, sc: str) -> None:
    _create(api, sc, retentionType="MANUAL_RELEASE_AT_USER_STREAMCUT")
    stream = sel.get_stream(sc, "st")
    head = {str(s.id): 0 for s in sel.head_segments(stream)}
    row = Subscriber.objects.get(stream=stream)
    assert row.stream_cut == head
    path = f"/v1/scopes/{sc}/readergroups/rg/subscriber-stream-cuts"
    first = next(iter(head))
    moved = {**head, first: 0}
    ok(api.put(path, {"streamCuts": {f"{sc}/st": moved}}, format="json"), 204)
    bad = {"streamCuts": {f"{sc}/st": {first: 0}}}
    error(api.put(path, bad, format="json"), 400, "invalid-stream-cut")


@pytest.mark.parametrize(
    "body",
    [
        {"readerGroupName": "rg", "streams": {}},
        {"readerGroupName": "rg", "streams": {"nostream": "head"}},
        {"readerGroupName": "rg", "streams": {"a/b": "middle"}},
        {"readerGroupName": "rg", "streams": {"a/b": {"x": 1}}},
        {"readerGroupName": "rg", "streams": {"a/b": "mrcut1.garbage"}},
        {"readerGroupName": "bad name!", "streams": {"a/b": "head"}},
        {"readerGroupName": "rg", "streams": {"a/b": "head"}, "readerTimeoutMs": 5},
        {"readerGroupName": "rg", "streams": {"a/b": "head"}, "retentionType": "SOMETIMES"},
    ],
)
def test_bad_configurations_are_refused_clearly(api: APIClient, sc: str, body: dict) -> None:
    response = api.post(f"/v1/scopes/{sc}/readergroups", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid-argument"
    assert not ReaderGroup.objects.filter(scope__name=sc).exists()


def test_bad_sync_requests_are_refused_clearly(api: APIClient, sc: str) -> None:
    _create(api, sc)
    base = f"/v1/scopes/{sc}/readergroups/rg"
    ok(api.post(f"{base}/readers", {"readerId": "a"}, format="json"), 201)
    for body in (
        {},
        {"generation": -1},
        {"generation": 0, "positions": {"not-a-key": 1}},
        {"generation": 0, "positions": {f"{sc}/st/1": -5}},
        {"generation": 0, "ended": "everything"},
    ):
        response = api.post(f"{base}/readers/a/sync", body, format="json")
        assert response.status_code == 400, (body, response.content)
    error(
        api.post(f"{base}/readers/nobody/sync", {"generation": 0}, format="json"),
        410,
        "reader-not-in-group",
    )
    error(
        api.post(f"/v1/scopes/{sc}/readergroups/nosuch/readers", {"readerId": "a"}, format="json"),
        404,
        "reader-group-not-found",
    )
