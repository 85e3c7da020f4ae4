"""The console's Kafka page, in headless Chromium against a real standalone node: a
confluent-kafka consumer group reads a topic and commits; the page shows the node's listener,
the group's state, its member, the lag round's status and, per partition, what it committed,
the end and the lag in records, bytes and seconds; the metrics, the REST API
(``/v1/kafka/groups``, with a token) and ``millrace kafka groups`` say the same."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.acceptance import kafka_clients as kc
from tests.acceptance.standalone_node import Standalone, eventually, request
from tests.console.conftest import screenshot, sign_in

pytestmark = pytest.mark.slow


def test_the_kafka_page_shows_listeners_groups_and_lag(chromium: Any, node: Standalone) -> None:
    from confluent_kafka import Consumer, Producer

    producer = Producer(kc.confluent(node))
    for i in range(30):
        producer.produce("clicks", value=f"click {i}")
    assert producer.flush(30) == 0
    consumer = Consumer(kc.confluent(node, **{
        "group.id": "dashboards", "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "client.id": "dashboard-1",
    }))  # fmt: skip
    consumer.subscribe(["clicks"])
    got = 0
    deadline = time.monotonic() + 60
    while got < 20 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            got += 1
            if got == 20:
                consumer.commit(message=message, asynchronous=False)  # 20 of 30 read
    try:

        def lagging() -> Any:
            status, body = request(node.base, "GET", "/v1/kafka/groups", node.token)
            assert status == 200, body
            groups = {g["group"]: g for g in body["groups"]}
            group = groups.get("dashboards")
            consumer.poll(0.2)  # (as a consumer does: a rebalance it is asked to join completes)
            settled = group and group["members"] and group["state"] == "Stable"
            judged = group and group["status"] == "OK" and group["lagBytes"]  # (the lag round's)
            return body if settled and judged and group["lag"] == 10 else None

        body = eventually(lagging, 60, "the group reported, Stable, with a lag of 10, judged OK")
        assert body["listeners"][0]["bootstrap"] == f"127.0.0.1:{node.kafka_port}"
        group = next(g for g in body["groups"] if g["group"] == "dashboards")
        assert group["state"] == "Stable" and group["members"][0]["client"] == "dashboard-1"
        (partition,) = group["partitions"]
        assert {k: partition[k] for k in ("topic", "partition", "committed", "end", "lag")} == {
            "topic": "clicks", "partition": 0, "committed": 20, "end": 30, "lag": 10}  # fmt: skip
        # (ten records of 7 or 8 bytes, each stored with Millrace's framing)
        assert 70 <= partition["lagBytes"] == group["lagBytes"] < 400
        assert partition["lagSeconds"] >= 0 and group["reason"]

        status, scraped = 0, ""
        import urllib.request

        scrape = urllib.request.Request(node.base + "/metrics", headers={
            "Authorization": f"Token {node.token}"})  # fmt: skip
        with urllib.request.urlopen(scrape, timeout=30) as answer:
            status, scraped = answer.status, answer.read().decode()
        assert status == 200
        assert ('millrace_kafka_group_lag_records{group="dashboards",partition="0",topic="clicks"}'
                ' 10.0') in scraped  # fmt: skip
        assert 'millrace_kafka_group_status{group="dashboards",status="OK"} 1.0' in scraped
        assert (
            f'millrace_kafka_group_lag_bytes{{group="dashboards"}} {group["lagBytes"]}' in scraped
        )
        shown = subprocess.run(
            [sys.executable, "-m", "millrace.ops.cli", "kafka", "groups", "--url", node.base,
             "--token", node.token],
            capture_output=True, text=True, timeout=60, env={**os.environ},
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert "group dashboards: Stable, 1 member(s), lag 10 record(s)" in shown.stdout
        assert "  status OK (" in shown.stdout
        assert "clicks" in shown.stdout

        password = (node.data_dir / "admin-password").read_text().strip()
        page = sign_in(chromium, node, "admin", password)
        page.click("nav >> text=Kafka")
        expect(page.locator("#kafka-listeners")).to_contain_text(f"127.0.0.1:{node.kafka_port}")
        section = page.locator("section.kafka-group[data-group=dashboards]")
        expect(section.locator("h3")).to_contain_text("Stable")
        expect(section).to_contain_text("dashboard-1")
        row = section.locator("tr[data-topic=clicks][data-partition='0']")
        expect(row.locator("td")).to_have_text(
            ["clicks", "0", "20", "30", "10", re.compile(r"\d+\sbytes"), re.compile(r"[\d.]+ s")]
        )
        expect(section.locator(".kafka-lag-status")).to_have_attribute("data-status", "OK")
        screenshot(page, "kafka")
    finally:
        consumer.close()
