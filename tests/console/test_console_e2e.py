"""The console end to end, in headless Chromium against a real standalone node: an operator's
day (sign in, create, write with the Python client, browse, follow the live tail, scale from
the key-space bar, checkpoint a reader group, commit a transaction, seal, delete) and a
viewer's (refused every change, in the page and over REST, each refusal audited)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import Standalone, request
from tests.console.conftest import SCREENSHOTS, message, screenshot, sign_in

pytestmark = pytest.mark.slow


def admin_password(node: Standalone) -> str:
    return (node.data_dir / "admin-password").read_text().strip()


def test_an_operators_day_in_the_console(chromium: Any, node: Standalone) -> None:
    page = sign_in(chromium, node, "admin", admin_password(node))
    expect(page.locator("h1")).to_have_text("Dashboard")

    # a scope, and a stream in it (a bad field is refused beside it first)
    page.click("text=Scopes")
    expect(page.locator(".empty")).to_contain_text("No scopes yet")
    page.fill("input[name=scopeName]", "web")
    page.click("text=Create scope")
    expect(message(page)).to_have_text("scope web created")
    expect(page.locator(".empty")).to_contain_text("No streams yet")
    page.click("text=New stream")
    page.fill("#f-streamName", "clicks")
    page.fill("#f-scalingPolicy-minSegments", "0")
    page.click("button:has-text('Create stream')")
    expect(page.locator('[data-error-for="scalingPolicy.minSegments"]')).to_contain_text(
        "greater than or equal to 1"
    )
    page.fill("#f-scalingPolicy-minSegments", "2")
    page.fill("#f-streamTags", "ui, e2e")
    page.click("button:has-text('Create stream')")
    expect(message(page)).to_have_text("stream web/clicks created")
    expect(page.locator("h1")).to_contain_text("web/clicks")
    expect(page.locator("svg.keyspace .seg")).to_have_count(2)
    page.click("nav.crumbs >> text=web")
    expect(page.locator("tr[data-stream='clicks']")).to_contain_text("e2e")
    screenshot(page, "streams")
    page.click("tr[data-stream='clicks'] >> text=clicks")

    # events written with the Python client, seen in the event browser
    manager = StreamManager(node.base, token=node.token)
    writer = manager.create_writer("web", "clicks")
    for i in range(50):
        writer.write_event(f'{{"click": {i}, "page": "/home"}}', routing_key=f"user-{i % 5}")
    writer.flush()
    page.click("text=Browse events")
    expect(page.locator("#events-table tbody tr")).to_have_count(50)
    expect(page.locator("#events-table")).to_contain_text('{"click": 49, "page": "/home"}')
    page.goto(page.url.split("?")[0] + "?from=head&q=%22click%22%3A+7%2C&view=json")
    expect(page.locator("#events-table tbody tr")).to_have_count(1)
    expect(page.locator("#events-table pre")).to_contain_text('"click": 7,')
    screenshot(page, "events")

    # the live tail receives what is written after it started
    page.click("#tail-start")
    expect(page.locator("#tail-status")).to_have_text("following")
    for i in range(20):
        writer.write_event(f"live {i}", routing_key="user-live")
    writer.flush()
    expect(page.locator("#tail-rows tr")).to_have_count(20)
    expect(page.locator("#tail-rows tr").first).to_contain_text("live 19")
    page.click("#tail-pause")
    expect(page.locator("#tail-status")).to_contain_text("paused")
    writer.write_event("while paused", routing_key="user-live")
    writer.flush()
    expect(page.locator("#tail-count")).to_have_text("21")
    expect(page.locator("#tail-rows tr")).to_have_count(20)  # not drawn while paused
    page.click("#tail-pause")
    expect(page.locator("#tail-rows tr").first).to_contain_text("while paused")
    screenshot(page, "live-tail")

    # scale from the key-space bar; the new epoch is in the history chart
    page.goto(f"{node.base}/scopes/web/streams/clicks/")
    page.locator('svg.keyspace .seg[data-number="0"]').click()
    expect(page.locator('input[name=segment][data-number="0"]')).to_be_checked()
    page.click("button:has-text('Split chosen')")
    expect(message(page)).to_have_text("stream web/clicks scaled: epoch 1")
    expect(page.locator("svg.keyspace .seg")).to_have_count(3)
    screenshot(page, "stream")
    page.click("text=Epoch history")
    expect(page.locator("#epoch-history g.epoch")).to_have_count(2)
    expect(page.locator('#epoch-history g.epoch[data-epoch="1"] rect')).to_have_count(3)
    screenshot(page, "epoch-history")

    # a reader group's checkpoint, started here, waits for its reader, then completes
    group = manager.create_reader_group("web", "billing", ["web/clicks"])
    member = group.create_reader("reader-1")
    assert member.read_next(timeout=10) is not None
    page.goto(f"{node.base}/scopes/web/readergroups/billing/")
    expect(page.locator("[data-reader='reader-1']")).to_be_visible()
    # the lag round's figures and status (controller_app/lag.py)
    expect(page.locator("#lag-status")).to_contain_text("Status:")
    expect(page.locator("#lag-status")).to_have_attribute("data-status", re.compile("^(OK|STALL)$"))
    page.fill("input[name=checkpointName]", "cp-1")
    page.click("text=Start checkpoint")
    expect(message(page)).to_contain_text("checkpoint cp-1 started")
    row = page.locator("#checkpoints tr[data-checkpoint='cp-1']")
    expect(row).to_contain_text("waiting")
    expect(row).to_contain_text("reader-1")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "complete" not in row.inner_text():
        member.read_next(timeout=0.5)
        page.reload()
    expect(row).to_contain_text("complete")
    screenshot(page, "reader-group")
    member.close()

    # a transaction committed from its page
    txn = manager.create_transaction_writer("web", "clicks").begin_txn()
    txn.write_event("in the transaction", routing_key="user-1")
    txn.flush()
    txn_id = str(txn.txn_id)
    page.goto(f"{node.base}/scopes/web/transactions/")
    expect(page.locator(f"tr[data-txn='{txn_id}']")).to_contain_text("open")
    page.locator(f"tr[data-txn='{txn_id}'] button:has-text('Commit')").click()
    expect(message(page)).to_have_text(f"transaction {txn_id} committed")
    status, body = request(
        node.base, "GET", f"/v1/scopes/web/streams/clicks/transactions/{txn_id}", node.token
    )
    assert (status, body["state"]) == (200, "COMMITTED")
    expect(page.locator(".empty")).to_contain_text("No open transactions")

    # two transactions ticked on the stream's page, committed at once
    writers = manager.create_transaction_writer("web", "clicks")
    ticked = [writers.begin_txn() for _ in range(2)]
    for number, each in enumerate(ticked):
        each.write_event(f"ticked {number}", routing_key="user-1")
        each.flush()
    page.goto(f"{node.base}/scopes/web/streams/clicks/?tab=transactions")
    page.locator("button:has-text('Commit selected')").click()
    expect(message(page)).to_have_text("invalid-argument: tick the transactions to commit")
    for each in ticked:
        page.locator(f"tr[data-txn='{each.txn_id}'] input[type=checkbox]").check()
    page.locator("button:has-text('Commit selected')").click()
    expect(message(page)).to_have_text("2 transactions of web/clicks committed")
    for each in ticked:
        path = f"/v1/scopes/web/streams/clicks/transactions/{each.txn_id}"
        assert request(node.base, "GET", path, node.token)[1]["state"] == "COMMITTED"

    # seal, then delete (typing the name to confirm)
    page.goto(f"{node.base}/scopes/web/streams/clicks/")
    page.click("button:has-text('Seal')")
    expect(message(page)).to_have_text("stream web/clicks sealed")
    expect(page.locator("#stream-state")).to_have_text("sealed")
    page.click("summary:has-text('Delete')")
    page.fill("details.confirm input[name=confirm]", "clicks")
    page.click("button:has-text('Delete web/clicks')")
    expect(message(page)).to_have_text("stream web/clicks deleted")
    expect(page.locator(".empty")).to_contain_text("No streams yet")
    writer.close()

    # every change above is in the audit log, attributed to admin from the console
    request(node.base, "POST", "/v1/scopes/web/streams", node.token, {"streamName": "pages"})
    page.goto(f"{node.base}/audit/?user=admin&object=web")
    actions = page.locator("#audit-table tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.action + ' ' + r.dataset.result)"
    )
    for done in ("scope.create ok", "stream.create failed", "stream.create ok",
                 "stream.scale ok", "readergroup.checkpoint ok", "transaction.commit ok",
                 "stream.seal ok", "stream.delete ok"):  # fmt: skip
        assert done in actions, (done, actions)
    screenshot(page, "audit")
    # the dashboard's Tiers card: what the cache holds, in memory and on disk (none here)
    page.goto(f"{node.base}/")
    expect(page.locator("#cache-memory")).to_have_text(re.compile(r"^\d+(\.\d)? (B|KiB|MiB|GiB)$"))
    expect(page.locator("#cache-disk")).to_have_text("0 B")
    if SCREENSHOTS:  # the dashboard once its charts have a few points
        page.goto(f"{node.base}/")
        expect(page.locator("#health mark.status").first).to_be_visible()
        busy = manager.create_writer("web", "pages")
        for _ in range(16):  # some traffic for the charts
            for i in range(500):
                busy.write_event(f"view {i}", routing_key=f"user-{i % 7}")
            busy.flush()
            page.wait_for_timeout(500)
        busy.close()
        screenshot(page, "dashboard")
    page.close()


def _make_viewer(node: Standalone) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", "user", "create", "vic", "--role", "viewer",
         "--data-dir", str(node.data_dir)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    password = re.search(r"console password: (\S+)", lines[0])
    assert password is not None, done.stdout
    return password.group(1), lines[-1]


def test_a_viewer_is_refused_every_change_and_the_refusals_are_audited(
    chromium: Any, node: Standalone
) -> None:
    assert request(node.base, "POST", "/v1/scopes", node.token, {"scopeName": "shop"})[0] == 201
    status, _ = request(
        node.base, "POST", "/v1/scopes/shop/streams", node.token,
        {"streamName": "orders", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1}},
    )  # fmt: skip
    assert status == 201
    password, token = _make_viewer(node)
    page = sign_in(chromium, node, "vic", password)
    expect(page.locator("mark.role")).to_have_text("viewer")

    # reading works; every control that changes something is disabled
    page.goto(f"{node.base}/scopes/")
    expect(page.locator("button:has-text('Create scope')")).to_be_disabled()
    page.goto(f"{node.base}/scopes/shop/streams/orders/")
    expect(page.locator("h1")).to_contain_text("shop/orders")
    for label in ("Split chosen", "Merge chosen", "Seal"):
        expect(page.locator(f"button:has-text('{label}')")).to_be_disabled()

    # a change sent anyway (the browser's own session and CSRF token) is refused and says why
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    for path, form in (
        ("/scopes/create", {"scopeName": "sneaky"}),
        ("/scopes/shop/streams/orders/seal", {}),
        ("/scopes/shop/streams/orders/scale", {"how": "split", "segment": "0"}),
    ):
        answer = page.request.post(
            node.base + path, form=form, headers={"X-CSRFToken": csrf, "Referer": page.url}
        )
        assert answer.status == 403, (path, answer.status)
        assert "permission-denied" in answer.text()
        assert "this needs the operator role or a stronger one" in answer.text()
    page.goto(f"{node.base}/scopes/")
    expect(page.locator("[data-scope='sneaky']")).to_have_count(0)

    # the same over REST with the viewer's API token
    status, body = request(node.base, "POST", "/v1/scopes", token, {"scopeName": "sneaky"})
    assert (status, body["code"]) == (403, "permission-denied")
    status, body = request(
        node.base, "PUT", "/v1/scopes/shop/streams/orders/state", token, {"streamState": "SEALED"}
    )
    assert (status, body["code"]) == (403, "permission-denied")
    assert request(node.base, "GET", "/v1/scopes/shop/streams/orders", token)[0] == 200

    # each refusal is in the audit log, with where it came from
    page.goto(f"{node.base}/audit/?user=vic")
    rows = page.locator("#audit-table tbody tr")
    expect(rows).to_have_count(5)
    found = rows.evaluate_all("rows => rows.map(r => r.dataset.action + ' ' + r.dataset.result)")
    assert sorted(found) == sorted([
        "scope.create refused", "stream.seal refused", "stream.scale refused",
        "scope.create refused", "stream.seal refused",
    ]), found  # fmt: skip
    expect(page.locator("#audit-table")).to_contain_text("console")
    expect(page.locator("#audit-table")).to_contain_text("rest")
    csv_answer = page.request.get(f"{node.base}/audit/?user=vic&format=csv")
    assert csv_answer.headers["content-type"].startswith("text/csv")
    assert csv_answer.text().count("refused") == 5
    status, _ = request(node.base, "GET", "/v1/scopes/shop/streams/orders", node.token)
    assert status == 200  # nothing changed: the stream is still there, still active
    page.close()


def test_the_newest_events_are_the_newest_of_every_segment(chromium: Any, node: Standalone) -> None:
    """The dashboard's search opens a stream's events in one step. The event browser opens on
    the newest events: on a two-segment stream they come from both segments, in append order;
    on an epoch of 260,000 events they are the last ones written, with no "search stopped"
    (each segment is read back from its tail)."""
    manager = StreamManager(node.base, token=node.token)
    manager.create_scope("newest")
    manager.create_stream("newest", "two", initial_segments=2)
    keys = ["a", "c"]  # (one key per segment: their points are 0.94 and 0.23)
    with manager.create_writer("newest", "two") as writer:
        for i in range(300):
            writer.write_event(f"two-{i}", routing_key=keys[i % 2])
            if i % 50 == 49:
                writer.flush()
                time.sleep(0.05)  # (appends at distinct times: the estimate orders by them)
    manager.create_stream("newest", "big", initial_segments=1)
    with manager.create_writer("newest", "big") as writer:
        for i in range(260_000):
            writer.write_event(f"big-{i}", routing_key="k")
    page = sign_in(chromium, node, "admin", admin_password(node))
    # the dashboard's search opens a stream's newest events in one step, or lists matches
    page.fill("form.find input[name=q]", "newest/two")
    page.click("form.find button")
    page.wait_for_url(re.compile(r"/scopes/newest/streams/two/events"))
    page.goto(node.base + "/")
    expect(page.locator("text=standalone: no session")).to_be_visible()  # not "never"
    # one labelled rate window; the chart's time axis shows minutes from the first frame
    expect(page.locator("article").first).to_contain_text("averaged over 120 s")
    ticks = page.locator("#chart-throughput .u-axis").first.inner_text()
    assert not re.search(r"20[2-9][0-9]", ticks), ticks  # (years once, for the first seconds)
    for width in (1024, 1280, 1440, 1920):  # no page wider than the window
        page.set_viewport_size({"width": width, "height": 900})
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= width, f"the dashboard is {wide} px wide in a {width} px window"
    page.fill("form.find input[name=q]", "newes")
    page.click("form.find button")
    expect(page.locator("#find-table tbody tr")).to_have_count(2)
    page.click("tr[data-stream='newest/two'] >> text=newest events")
    rows = page.locator("#events-table tbody tr")
    expect(rows).to_have_count(100)
    assert "/scopes/newest/streams/two/events" in page.url
    segments = set(page.locator("#events-table tbody tr td:first-child").all_inner_texts())
    assert len(segments) == 2, segments  # both segments, not the last one read
    shown = [int(t.split("-")[1]) for t in page.locator("#events-table pre").all_inner_texts()]
    assert min(shown) >= 180 and max(shown) == 299  # the newest of both
    page.goto(node.base + "/scopes/newest/streams/big/events")
    expect(rows).to_have_count(100)
    expect(page.locator("#events-table")).to_contain_text("big-259999")
    expect(page.locator("#found-summary")).not_to_contain_text("search stopped")
    page.set_viewport_size({"width": 1280, "height": 900})
    for name, path in (("cluster", "/cluster/"), ("security", "/security/")):  # (the README's)
        page.goto(node.base + path)
        expect(page.locator("h1")).to_be_visible()
        screenshot(page, name)
    manager.close()


def test_an_admin_manages_users_in_the_console(chromium: Any, node: Standalone) -> None:
    """Make a user, change its role, disable and enable it, give it a new password, delete it;
    each change checked by the REST API as a program calls it, or by signing in."""
    password = (node.data_dir / "admin-password").read_text().strip()
    page = sign_in(chromium, node, "admin", password)
    page.goto(node.base + "/security/")
    page.fill("#user-create input[name=username]", "gil")
    page.select_option("#user-create select[name=role]", "viewer")
    page.click("#user-create button")
    made = message(page).inner_text()
    assert "user gil (viewer) made" in made
    token = re.search(r"API token ([0-9a-f]{40})", made)
    assert token is not None
    gil = token.group(1)
    row = page.locator("#user-table tr[data-user=gil]")
    expect(row).to_contain_text("viewer")
    assert request(node.base, "POST", "/v1/scopes", gil, {"scopeName": "gils"})[0] == 403
    row.locator("select[name=role]").select_option("operator")
    row.locator("button:has-text('Set role')").click()
    expect(message(page)).to_have_text("gil is operator now")
    assert request(node.base, "POST", "/v1/scopes", gil, {"scopeName": "gils"})[0] == 201
    row.locator("summary:has-text('Disable')").click()
    row.locator("button:has-text('Disable')").click()
    expect(message(page)).to_have_text("gil is disabled")
    expect(row).to_contain_text("disabled")
    assert request(node.base, "GET", "/v1/scopes", gil)[0] == 401
    row.locator("button:has-text('Enable')").click()
    assert request(node.base, "GET", "/v1/scopes", gil)[0] == 200
    row.locator("summary:has-text('Password')").click()
    row.locator("button:has-text('New password')").click()
    fresh = message(page).inner_text().rsplit(" ", 1)[-1]
    gils_page = sign_in(chromium, node, "gil", fresh)  # the new password signs in
    expect(gils_page.locator("h1").first).to_be_visible()
    gils_page.close()
    # the last active administrator stays
    admin_row = page.locator("#user-table tr[data-user=admin]")
    admin_row.locator("summary:has-text('Delete')").click()
    admin_row.locator("button:has-text('Delete')").click()
    expect(page.locator(".messages .message.error").first).to_contain_text(
        "last active administrator"
    )
    row.locator("summary:has-text('Delete')").click()
    row.locator("button:has-text('Delete')").click()
    expect(message(page)).to_have_text("gil is deleted")
    assert request(node.base, "GET", "/v1/scopes", gil)[0] == 401
    page.close()
