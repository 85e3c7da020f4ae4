"""Request workflows through the REST API, carried out by a real Celery worker process.

The API records intent and waits; a ``millrace worker`` subprocess (``live_worker``) runs the
task against the real segment store node. Checked: the response, the stored state, the segment
store and the invariant checker.
"""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from controller_app import selectors as sel
from controller_app.models import Stream
from controller_app.segment_client import segment_store
from tests.controller.conftest import write_events
from tests.controller.invariants import check_stream

pytestmark = pytest.mark.django_db(transaction=True)


def test_stream_lifecycle_through_the_worker(api: APIClient, live_worker, registered_node) -> None:
    sc = f"sc{uuid.uuid4().hex[:12]}"
    base = f"/v1/scopes/{sc}/streams/st"
    assert api.post("/v1/scopes", {"scopeName": sc}, format="json").status_code == 201
    body = {"streamName": "st", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2}}
    assert api.post(f"/v1/scopes/{sc}/streams", body, format="json").status_code == 201
    stream = sel.get_stream(sc, "st")
    _low, high = sel.current_segments(stream)
    write_events(registered_node.port, sel.segment_name(stream, high.id), b"x" * 12)

    scaled = api.post(
        f"{base}/scale",
        {"sealedSegments": [high.id], "newRanges": [[0.5, 0.75], [0.75, 1.0]]},
        format="json",
    )
    assert scaled.status_code == 200, (scaled.json(), live_worker.output()[-3000:])
    assert scaled.json()["status"] == "COMPLETED" and scaled.json()["epoch"] == 1
    assert len(scaled.json()["segments"]) == 3
    assert segment_store().info(sel.segment_name(stream, high.id)).sealed

    txn = api.post(f"{base}/transactions", {"leaseMs": 10_000}, format="json").json()
    for name in txn["segments"]:
        write_events(registered_node.port, name, b"in-txn")
    committed = api.post(f"{base}/transactions/{txn['txnId']}/commit", {"wait": 30}, format="json")
    assert committed.json()["state"] == "COMMITTED", live_worker.output()[-3000:]

    stream = sel.get_stream(sc, "st")
    cut = {str(s.id): 0 for s in sel.current_segments(stream)}
    truncated = api.post(f"{base}/truncate", {"streamCut": cut}, format="json")
    assert truncated.status_code == 200, truncated.json()
    assert not segment_store().info(sel.segment_name(stream, high.id)).exists
    assert check_stream(sel.get_stream(sc, "st")) == []

    sealed = api.put(f"{base}/state", {"streamState": "SEALED"}, format="json")
    assert sealed.json() == {"streamState": "SEALED"}
    stream = sel.get_stream(sc, "st")
    assert check_stream(stream) == []
    names = [sel.segment_name(stream, s.id) for s in sel.epoch_record(stream, 0).segment_list()]
    assert api.delete(base).status_code == 204
    assert not Stream.objects.filter(pk=stream.pk).exists()
    assert not any(segment_store().info(name).exists for name in names)


def test_transactions_committed_at_once_all_or_none(
    api: APIClient, live_worker, registered_node
) -> None:
    """``POST .../transactions/commit`` commits several transactions in one request: with one
    that cannot be committed (aborted) or does not exist, none is, and the answer names it;
    without, all of them (asking again is fine), their events in the stream in the order given."""
    sc = f"sc{uuid.uuid4().hex[:12]}"
    base = f"/v1/scopes/{sc}/streams/st"
    assert api.post("/v1/scopes", {"scopeName": sc}, format="json").status_code == 201
    body = {"streamName": "st", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1}}
    assert api.post(f"/v1/scopes/{sc}/streams", body, format="json").status_code == 201
    txns = [api.post(f"{base}/transactions", {"leaseMs": 30_000}, format="json").json()]
    txns += [api.post(f"{base}/transactions", {"leaseMs": 30_000}, format="json").json()]
    txns += [api.post(f"{base}/transactions", {"leaseMs": 30_000}, format="json").json()]
    for number, txn in enumerate(txns):
        write_events(registered_node.port, txn["segments"][0], f"txn-{number}".encode())
    ids = [t["txnId"] for t in txns]
    aborted = api.post(f"{base}/transactions/{ids[1]}/abort", {"wait": 30}, format="json")
    assert aborted.json()["state"] == "ABORTED", live_worker.output()[-3000:]

    def commit(txn_ids: object) -> dict:
        got = api.post(
            f"{base}/transactions/commit", {"txnIds": txn_ids, "wait": 30}, format="json"
        )
        return {"status": got.status_code, **got.json()}

    refused = commit(ids)
    assert refused["status"] == 412 and ids[1] in refused["message"], refused
    unknown = str(uuid.uuid4())
    assert commit([ids[0], unknown])["status"] == 404
    states = [api.get(f"{base}/transactions/{t}").json()["state"] for t in ids]
    assert states == ["OPEN", "ABORTED", "OPEN"]  # (nothing of the refused requests)
    for bad in ([], ["not-an-id"], [ids[0]] * 1001, ids[0]):
        assert commit(bad)["status"] == 400, bad

    done = commit([ids[2], ids[0]])
    assert done["status"] == 200, (done, live_worker.output()[-3000:])
    assert done["transactions"] == [
        {"txnId": ids[2], "state": "COMMITTED"}, {"txnId": ids[0], "state": "COMMITTED"}
    ]  # fmt: skip
    assert commit([ids[0], ids[2]])["status"] == 200  # committed already: fine
    stream = sel.get_stream(sc, "st")
    (segment,) = sel.current_segments(stream)
    data = segment_store().read(sel.segment_name(stream, segment.id), 0, 1 << 16)
    assert data.index(b"txn-2") < data.index(b"txn-0") and b"txn-1" not in data
    assert check_stream(stream) == []
