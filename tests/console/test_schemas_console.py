"""The schema registry in the console, in headless Chromium against a real standalone node: a
program registers two versions with Confluent's client, and an admin finds the subject, reads a
version and the diff between two, tests a schema that breaks compatibility (told why) and one
that does not, changes the subject's level, is told why a bad schema is refused, registers a
version, and soft-deletes one; the changes are in the audit log."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from playwright.sync_api import expect

from tests.acceptance.standalone_node import Standalone, request
from tests.console.conftest import message, screenshot, sign_in

pytestmark = pytest.mark.slow

V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "note", "type": "string", "default": ""}]}
BREAKS = {**V1, "fields": [*V1["fields"], {"name": "qty", "type": "int"}]}


def test_an_admin_reads_diffs_tests_and_changes_schemas(chromium: Any, node: Standalone) -> None:
    password = (node.data_dir / "admin-password").read_text().strip()
    client = SchemaRegistryClient(
        {"url": f"{node.base}/registry", "basic.auth.user.info": f"admin:{password}"}
    )
    page = sign_in(chromium, node, "admin", password)
    page.click("nav >> text=Schemas")
    expect(page.locator(".empty")).to_contain_text("No schemas yet")
    client.register_schema("shop.orders-value", Schema(json.dumps(V1), "AVRO"))
    second = client.register_schema("shop.orders-value", Schema(json.dumps(V2), "AVRO"))
    page.reload()
    row = page.locator("#subjects tr[data-subject='shop.orders-value']")
    expect(row.locator("td").nth(1)).to_have_text("2")
    expect(row.locator("td").nth(2)).to_have_text(str(second))
    expect(row.locator("td").nth(4)).to_have_text("BACKWARD")

    row.locator("a").click()
    expect(page.locator("#versions tbody tr")).to_have_count(2)
    expect(page.locator("#schema-text")).to_contain_text('"note"')
    page.locator("tr[data-version='1'] a.diff-link").click()
    expect(page.locator("#diff .added")).to_contain_text(['"name": "note"'])
    screenshot(page, "schema-diff")

    page.fill("#schema-test textarea[name=schema]", json.dumps(BREAKS))
    page.click("#schema-test button")
    expect(page.locator("#verdict")).to_have_text("Not compatible:")
    expect(page.locator("#problems")).to_contain_text("qty")
    page.fill("#schema-test textarea[name=schema]", json.dumps(V2))
    page.click("#schema-test button")
    expect(page.locator("#verdict")).to_have_text("Compatible: it may be registered.")

    page.select_option("#subject-config select", "NONE")
    page.click("#subject-config button")
    expect(message(page)).to_have_text("shop.orders-value compatibility: NONE")
    expect(page.locator("#level")).to_have_text("NONE")

    register = page.locator("form[action$='/schemas/register']").last
    register.locator("textarea").fill('{"type": "record"}')
    register.locator("button").click()
    expect(page.locator(".messages .message.error").first).to_contain_text("42201")
    register = page.locator("form[action$='/schemas/register']").last
    register.locator("textarea").fill(json.dumps(BREAKS))
    register.locator("button").click()
    expect(message(page)).to_contain_text("shop.orders-value: version 3")
    assert client.get_latest_version("shop.orders-value").version == 3

    version_one = page.locator("tr[data-version='1']")
    version_one.locator("summary").click()
    version_one.locator("input[name=confirm]").check()
    version_one.locator("button:has-text('Delete')").click()
    expect(message(page)).to_have_text("shop.orders-value version 1 deleted")
    assert client.get_versions("shop.orders-value") == [2, 3]

    page.goto(node.base + "/audit/")
    for action in ("schema.register", "schema.config", "schema.delete-version"):
        expect(page.locator("body")).to_contain_text(action)


def test_an_operator_binds_a_stream_to_its_subject_from_its_page(
    chromium: Any, node: Standalone
) -> None:
    """The stream page shows its subject and enforcement and sets them; the change holds for
    the stream's appends, and is in the audit log."""
    password = (node.data_dir / "admin-password").read_text().strip()
    assert request(node.base, "POST", "/v1/scopes", node.token, {"scopeName": "bound"})[0] == 201
    status, answer = request(node.base, "POST", "/v1/scopes/bound/streams", node.token,
                             {"streamName": "orders"})  # fmt: skip
    assert status == 201, answer
    page = sign_in(chromium, node, "admin", password)
    page.goto(f"{node.base}/scopes/bound/streams/orders/")
    expect(page.locator("#stream-schema")).to_contain_text(
        "subject bound.orders-value (the default), enforcement none"
    )
    page.locator("#schema-binding summary").click()
    page.select_option("#schema-binding select[name=enforcement]", "header")
    page.click("#schema-binding button")
    expect(message(page)).to_have_text(
        "bound/orders: subject bound.orders-value, enforcement header"
    )
    expect(page.locator("#stream-schema")).to_contain_text("enforcement header")
    time.sleep(1.0)  # (the node reads a stream's policy again when what it read is 1 s old)
    status, answer = request(node.base, "POST", "/v1/scopes/bound/streams/orders/events",
                             node.token, {"events": [{"data": "not framed"}]})  # fmt: skip
    assert (status, answer["code"]) == (400, "schema-refused"), answer
    page.goto(node.base + "/audit/")
    expect(page.locator("body")).to_contain_text("stream.schema")

    # Events decoded by their schema ids: the event browser's and the live tail's "schema" view
    client = SchemaRegistryClient(
        {"url": f"{node.base}/registry", "basic.auth.user.info": f"admin:{password}"}
    )
    serialize = AvroSerializer(client, json.dumps(V2))
    value = SerializationContext("bound.orders", MessageField.VALUE)
    events = f"{node.base}/scopes/bound/streams/orders/events"
    _append(node, serialize({"id": 7, "note": "first"}, value))
    page.goto(events + "?view=schema")
    expect(page.locator("pre.event").first).to_contain_text('"note": "first"')
    page.goto(events + "?from=tail&live=1&view=schema")
    expect(page.locator("#tail-status")).to_have_text("following")
    _append(node, serialize({"id": 8, "note": "live"}, value))
    expect(page.locator("#tail-rows")).to_contain_text('"note": "live"')
    screenshot(page, "schema-tail")


def _append(node: Standalone, data: bytes) -> None:
    body = {"events": [{"dataBase64": base64.b64encode(data).decode()}]}
    path = "/v1/scopes/bound/streams/orders/events"
    status, answer = request(node.base, "POST", path, node.token, body)
    assert status == 201, answer
