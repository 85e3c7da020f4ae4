"""Key-value tables in the console, in headless Chromium against a real standalone node: an
operator creates a table, a program writes entries with the Python client, and the operator
sees the partitions and their sizes, searches by key prefix, pages through the entries, edits
one at the version shown (refused once the entry changed meanwhile), adds one, removes one with
confirmation, and deletes the table; every change is in the audit log."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from millrace.client.kvt import KeyValueTableManager
from millrace.client.manager import StreamManager
from millrace.kernel.kvt import partition_of
from tests.acceptance.standalone_node import Standalone
from tests.console.conftest import message, screenshot, sign_in

pytestmark = pytest.mark.slow


def test_an_operator_browses_and_edits_a_key_value_table(chromium: Any, node: Standalone) -> None:
    password = (node.data_dir / "admin-password").read_text().strip()
    with StreamManager(node.base, node.token) as streams:
        streams.create_scope("shop")
    page = sign_in(chromium, node, "admin", password)
    page.goto(node.base + "/scopes/shop/streams/")
    page.click("text=Key-value tables")
    expect(page.locator(".empty")).to_contain_text("No key-value tables")
    page.fill("input[name=kvtName]", "carts")
    page.fill("input[name=partitionCount]", "3")
    page.fill("input[name=primaryKeyLength]", "8000")  # with 500 more: over the key limit
    page.fill("input[name=secondaryKeyLength]", "500")
    page.click("button:has-text('Create table')")
    expect(page.locator(".messages .message.error").first).to_contain_text("8192")
    page.fill("input[name=kvtName]", "carts")
    page.fill("input[name=partitionCount]", "3")
    page.fill("input[name=primaryKeyLength]", "6")
    page.fill("input[name=secondaryKeyLength]", "0")
    page.click("button:has-text('Create table')")
    expect(message(page)).to_have_text("key-value table shop/carts created")
    expect(page.locator("#partitions tbody tr")).to_have_count(3)
    expect(page.locator("#placement")).to_have_text("keys placed as Pravega's clients place them")

    with KeyValueTableManager(node.base, node.token) as manager:
        table = manager.open("shop", "carts")
        for n in range(120):
            table.put(b"c%05d" % n, b"items=%d" % n)
        page.reload()
        counts = [
            int(c) for c in page.locator("#partitions tbody td:nth-child(4)").all_inner_texts()
        ]
        assert sum(counts) == 120
        # each entry in the partition Pravega's Java client computes (its hash, its ranges)
        assert counts == [sum(partition_of(b"c%05d" % n, 3) == p for n in range(120))
                          for p in range(3)]  # fmt: skip
        expect(page.locator("#entries tbody tr")).to_have_count(50)
        page.click("a[rel=next]")
        expect(page.locator("#entries tbody tr")).to_have_count(50)
        page.fill("input[name=prefix]", "c0011")
        page.click("button:has-text('Search')")
        expect(page.locator("#entries tbody tr")).to_have_count(10)
        screenshot(page, "kvtable")

        # edit one at the version shown
        row = page.locator("#entries tbody tr", has_text="c00110")
        row.locator("textarea").fill("items=none")
        row.locator("button:has-text('Save')").click()
        expect(message(page)).to_contain_text("c00110 saved")
        assert table.get(b"c00110").value == b"items=none"
        # the same row again, after a program changed the entry: refused, nothing lost
        table.put(b"c00110", b"items=program")
        stale = page.locator("#entries tbody tr", has_text="c00110")
        stale.locator("textarea").fill("items=stale")
        version_shown = int(stale.locator("td:nth-child(3)").inner_text())
        assert version_shown < table.get(b"c00110").version
        stale.locator("button:has-text('Save')").click()
        expect(page.locator(".messages .message.error").first).to_contain_text("bad-key-version")
        assert table.get(b"c00110").value == b"items=program"

        # add one (only if absent), remove one with its confirmation
        page.fill("#entry-add input[name=key]", "new001")
        page.fill("#entry-add textarea[name=value]", "fresh")
        page.click("#entry-add button")
        expect(message(page)).to_contain_text("new001 saved")
        assert table.get(b"new001").value == b"fresh"
        page.fill("input[name=prefix]", "new")
        page.click("button:has-text('Search')")
        target = page.locator("#entries tbody tr").first
        target.locator("summary").click()
        target.locator("input[name=confirm]").check()
        target.locator("button:has-text('Remove')").click()
        expect(message(page)).to_contain_text("new001 removed")
        assert table.get(b"new001") is None
        table.close()

    page.locator("summary:has-text('Delete table')").click()
    page.fill("input[name=confirm]", "carts")
    page.click("button:has-text('Delete table carts')")
    expect(message(page)).to_have_text("key-value table shop/carts deleted")
    page.goto(node.base + "/audit/")
    logged = page.locator("main").inner_text()
    page.close()
    for action in ("kvtable.create", "kvtable.put", "kvtable.remove", "kvtable.delete"):
        assert action in logged, action
