"""Every console page rendered through Django (no browser): what it shows, how it refuses,
and how many queries it makes. The query budgets are fixed numbers: they must not grow with
the number of streams in a scope or of epochs of a stream."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from controller_app import selectors as sel
from controller_app.access.roles import grant
from controller_app.models import AuditEntry, Epoch, Stream
from controller_app.segment_client import segment_store
from controller_app.workflows import reader_groups, scale, scopes, streams, transactions
from controller_app.workflows.config import StreamConfig
from tests.controller.conftest import registered_node, segment_store_node  # noqa: F401
from tests.controller.factories import StreamFactory

pytestmark = pytest.mark.django_db


def browser(role: str | None) -> Client:
    user = get_user_model().objects.create_user(f"{role}{uuid.uuid4().hex[:6]}", password="pw")
    if role:
        grant(user, role)  # type: ignore[arg-type]
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def world(registered_node: Any) -> dict[str, Any]:  # noqa: F811
    sc = f"sc{uuid.uuid4().hex[:10]}"
    scopes.create_scope(sc)
    streams.create_stream(segment_store(), sc, "st", StreamConfig(min_segments=2, tags=("a",)))
    txn = transactions.create_transaction(segment_store(), sc, "st", lease_ms=60_000)
    config = reader_groups.ReaderGroupConfig(streams={f"{sc}/st": "head"})
    reader_groups.create_reader_group(segment_store(), sc, "rg", config)
    reader_groups.add_reader(sc, "rg", "r1")
    return {"sc": sc, "txn": str(transactions.transaction_uuid(txn))}


def pages(w: dict[str, Any]) -> list[str]:
    sc = w["sc"]
    base = f"/scopes/{sc}/streams/st"
    return [
        "/", "/dashboard/health", "/dashboard/live.json", "/scopes/",
        f"/scopes/{sc}/streams/", f"/scopes/{sc}/streams/?q=s&tag=a&sort=-created",
        f"/scopes/{sc}/streams/new", f"{base}/", f"{base}/edit",
        *[f"{base}/?tab={t}" for t in ("history", "retention", "transactions", "readers")],
        f"{base}/events", f"{base}/events?from=head&view=hex", f"{base}/events?from=tail",
        f"{base}/events?from=head&download=csv", f"/scopes/{sc}/transactions/",
        f"/scopes/{sc}/readergroups/", f"/scopes/{sc}/readergroups/rg/",
        "/audit/", "/audit/?user=x&object=y&action=stream.&since=2026-01-01T00:00",
        "/audit/?format=csv", "/cluster/", "/cluster/?part=tables",
    ]  # fmt: skip


def test_every_page_renders_for_a_viewer(world: dict[str, Any]) -> None:
    client = browser("viewer")
    for path in pages(world):
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)


def test_signed_out_goes_to_the_login_page_and_no_role_is_refused(world: dict[str, Any]) -> None:
    for path in pages(world):
        response = Client().get(path)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), path
    nobody = browser(None)
    response = nobody.get("/scopes/")
    assert response.status_code == 403
    assert b"this needs the viewer role or a stronger one" in response.content


def test_the_login_page_signs_in_with_a_username_and_password(db: None) -> None:
    user = get_user_model().objects.create_user("olga", password="s3cret-pass")
    grant(user, "operator")
    client = Client()
    assert b"Sign in" in client.get("/login/").content
    bad = client.post("/login/", {"username": "olga", "password": "nope"})
    assert bad.status_code == 200 and b"did not match" in bad.content
    good = client.post("/login/", {"username": "olga", "password": "s3cret-pass"})
    assert (good.status_code, good["Location"]) == (302, "/")
    assert client.get("/").status_code == 200


def test_a_viewers_changes_are_refused_and_audited(world: dict[str, Any]) -> None:
    client = browser("viewer")
    sc = world["sc"]
    before = Stream.objects.get(scope__name=sc, name="st").state
    for path, form in (
        ("/scopes/create", {"scopeName": "x"}),
        (f"/scopes/{sc}/streams/st/seal", {}),
        (f"/scopes/{sc}/streams/st/transactions/{world['txn']}/commit", {}),
        (f"/scopes/{sc}/streams/st/transactions/commit", {"txn": world["txn"]}),
    ):
        response = client.post(path, form)
        assert response.status_code == 403, path
    assert Stream.objects.get(scope__name=sc, name="st").state == before
    rows = AuditEntry.objects.filter(source="console", result="refused")
    assert sorted(rows.values_list("action", flat=True)) == [
        "scope.create", "stream.seal", "transaction.commit", "transaction.commit",
    ]  # fmt: skip


def test_an_operators_bad_form_shows_the_errors_beside_the_fields(world: dict[str, Any]) -> None:
    client = browser("operator")
    response = client.post(
        f"/scopes/{world['sc']}/streams/create",
        {"streamName": "n1", "scalingPolicy.type": "BY_RATE_IN_EVENTS_PER_SEC",
         "scalingPolicy.minSegments": "-3", "retentionPolicy.type": "LIMITED_WEEKS"},
    )  # fmt: skip
    assert response.status_code == 400
    text = response.content.decode()
    assert 'data-error-for="scalingPolicy.minSegments"' in text
    assert 'data-error-for="retentionPolicy.type"' in text
    entry = AuditEntry.objects.get(action="stream.create")
    assert entry.result == "failed" and "minSegments" in entry.detail


def test_a_refused_workflow_comes_back_worded_as_the_rest_api_words_it(
    world: dict[str, Any],
) -> None:
    client = browser("operator")
    response = client.post(f"/scopes/{world['sc']}/delete", {"confirm": world["sc"]}, follow=True)
    assert b"precondition-failed: scope" in response.content
    assert b"is not empty" in response.content
    entry = AuditEntry.objects.get(action="scope.delete")
    assert entry.result == "failed" and entry.detail.startswith("precondition-failed")


def _queries(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code == 200, path
    return len(captured.captured_queries)


def _scale(sc: str, sealed: list[Any], ranges: list[tuple[float, float]]) -> None:
    """One scale, run here as the worker would run it."""
    scale.scale_stream(sc, "st", [g.id for g in sealed], ranges, wait=None)
    scale.run_scale(segment_store(), sel.get_stream(sc, "st").pk)


def _grow(sc: str, more_streams: int, more_epochs: int) -> None:
    StreamFactory.create_batch(more_streams, scope=scopes.get_scope(sc))
    for _ in range(more_epochs):  # split the first segment, merge it back: two epochs
        first = sel.current_segments(sel.get_stream(sc, "st"))[0]
        mid = (first.key_start + first.key_end) / 2
        _scale(sc, [first], [(first.key_start, mid), (mid, first.key_end)])
        halves = sel.current_segments(sel.get_stream(sc, "st"))[:2]
        _scale(sc, halves, [(halves[0].key_start, halves[1].key_end)])


def test_query_counts_do_not_grow_with_streams_or_epochs(world: dict[str, Any]) -> None:
    client = browser("admin")
    # downloads stream their rows; a read from the head costs what it reads (the segments
    # between the head and its last event), like any reader's
    watched = [p for p in pages(world) if not any(x in p for x in ("download", "csv", "head"))]
    _grow(world["sc"], more_streams=5, more_epochs=2)
    before = {p: _queries(client, p) for p in watched}
    _grow(world["sc"], more_streams=120, more_epochs=4)
    assert Epoch.objects.filter(stream__name="st", stream__scope__name=world["sc"]).count() == 13
    after = {p: _queries(client, p) for p in watched}
    grew = {p: (before[p], after[p]) for p in watched if after[p] > before[p]}
    assert not grew, grew


def test_an_operator_resets_a_reader_group_to_the_head_a_time_or_a_cut(
    world: dict[str, Any],
) -> None:
    client = browser("operator")
    path = f"/scopes/{world['sc']}/readergroups/rg/reset"
    group = reader_groups.get_reader_group(world["sc"], "rg")
    generation = group.generation
    assert client.post(path, {"to": "head"}).status_code == 302
    assert client.post(path, {"to": "time", "time": "2026-01-01T00:00:00"}).status_code == 302
    group.refresh_from_db()
    assert group.generation == generation + 2
    response = client.post(path, {"to": "cut", "cut": "nonsense"}, follow=True)
    assert b"invalid-argument: not a stream cut" in response.content
    assert reader_groups.get_reader_group(world["sc"], "rg").generation == generation + 2
    assert list(
        AuditEntry.objects.filter(action="readergroup.reset")
        .order_by("pk")
        .values_list("result", flat=True)
    ) == ["ok", "ok", "failed"]  # (in the order written: PostgreSQL keeps no other)


def test_the_stream_search_answers_htmx_with_the_table_alone(world: dict[str, Any]) -> None:
    client = browser("viewer")
    path = f"/scopes/{world['sc']}/streams/?q=s&tag=a"
    partial = client.get(path, headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in partial and 'data-stream="st"' in partial
    whole = client.get(path).content.decode()
    assert "<html" in whole and 'id="stream-table"' in whole
    nothing = client.get(path.replace("q=s", "q=zzz"), headers={"HX-Request": "true"})
    assert b"No stream matches" in nothing.content


def test_the_stream_page_shows_how_to_use_it_from_spark(world: dict[str, Any]) -> None:
    page = browser("viewer").get(f"/scopes/{world['sc']}/streams/st/").content.decode()
    assert 'spark.read.format("millrace")' in page
    assert f'"scope": "{world["sc"]}", "stream": "st"' in page
    assert "http://testserver" in page  # the node's own address


def test_the_cluster_page_shows_nodes_the_leader_the_moves_and_their_chart(db: None) -> None:
    from controller_app.cluster.leader import Leader
    from controller_app.cluster.membership import DatabaseMembership
    from millrace.kernel.membership import NodeCard

    membership, clock = DatabaseMembership(), [100.0]
    for name in ("n1", "n2"):
        membership.join(NodeCard(name, "127.0.0.1", 7001 + int(name[1]), None, 4))
    leader = Leader("the-leader", 5.0, clock=lambda: clock[0])
    leader.round()
    clock[0] += 1
    membership.renew("n1")
    membership.renew("n2")
    leader.round()
    page = browser("viewer").get("/cluster/").content.decode()
    assert "the-leader" in page and 'data-node="n1"' in page and 'data-node="n2"' in page
    assert page.count("new</td>") == 4  # four containers placed
    assert '"series": {"n1": [' in page and "cluster.js" in page  # the chart's data
    tables = browser("viewer").get("/cluster/?part=tables").content.decode()
    assert "<h1>" not in tables and 'id="cluster-moves"' in tables
    assert "The canary has not run yet" in tables
    from django.utils import timezone

    from controller_app.models import CanaryProbe

    at = timezone.now()
    CanaryProbe.objects.create(node="n1", probed_at=at, succeeded_at=at, ack_seconds=0.002,
                               read_seconds=0.0031, successes=3, failures=1)  # fmt: skip
    CanaryProbe.objects.create(node="n2", probed_at=at, failures=2, last_error="TimeoutError: x")
    tables = browser("viewer").get("/cluster/?part=tables").content.decode()
    assert '<tr data-node="n1" data-ok="true">' in tables and "3.1 ms" in tables
    assert '<tr data-node="n2" data-ok="false">' in tables and "TimeoutError: x" in tables
    from controller_app.cluster.leader import LeaderThread

    LeaderThread(5.0, ("127.0.0.1", 9191), grpc_port=9190)._renew_own_session()
    tables = browser("viewer").get("/cluster/?part=tables").content.decode()
    assert "gRPC (Pravega's clients) <code>127.0.0.1:9190</code>" in tables
