"""Kafka consumer groups in the lag round (``controller_app.kafka_lag``): a group measured per
partition from the nodes' reports and its committed offsets (records, bytes from the mean
stored record size, seconds from the ends the rounds saw), its status judged as a reader
group's is, and a round that keeps a row per group and drops the rows of groups gone."""

from __future__ import annotations

import time
from typing import Any

import pytest

from controller_app import kafka_lag
from controller_app.kafka_catalog import kafka_groups
from controller_app.models import KafkaCommittedOffset, KafkaGroupLag, KafkaNodeReport

pytestmark = pytest.mark.django_db

MEMBER = {"member": "m-1", "client": "c-1", "host": "127.0.0.1"}


def _report(ends: dict[str, int], sizes: dict[str, int], members: list[Any]) -> None:
    groups = [{"group": "billing", "state": "Stable", "protocol": "range", "generation": 1,
               "members": members}]  # fmt: skip
    report = {"bootstrap": "127.0.0.1:9092", "groups": groups, "ends": ends, "sizes": sizes}
    KafkaNodeReport.objects.update_or_create(node="node-0", defaults={"report": report})


def _commit(partition: int, offset: int) -> None:
    KafkaCommittedOffset.objects.update_or_create(
        group="billing", topic="orders", partition=partition, defaults={"offset": offset}
    )


def _round(at_ms: int) -> dict[str, Any]:
    assert kafka_lag.measure_kafka_groups(at_ms, time.monotonic() + 60) == 1
    report: dict[str, Any] = KafkaGroupLag.objects.get(group="billing").report
    return report


def test_a_group_is_measured_per_partition_in_records_bytes_and_seconds() -> None:
    _commit(0, 40)
    _commit(1, 10)
    _report({"orders/0": 100, "orders/1": 10}, {"orders/0": 10_800, "orders/1": 900}, [MEMBER])
    first = _round(1_000)
    assert first["status"] == "OK" and first["lag"] == 60 and first["members"] == 1
    zero, one = first["partitions"]
    assert (zero["lag"], zero["lagBytes"]) == (60, 6_480)  # (60 records of 108 stored bytes)
    assert (one["lag"], one["lagBytes"], one["lagSeconds"]) == (0, 0, 0.0)
    assert zero["lagSeconds"] == 0.0  # (older than the first end seen: as old as it)
    _report({"orders/0": 200, "orders/1": 10}, {"orders/0": 21_600, "orders/1": 900}, [MEMBER])
    second = _round(11_000)
    # the committed offset 40 was passed before the first round's end (100): 10 s ago at least
    assert second["partitions"][0]["lagSeconds"] == 10.0
    _commit(0, 150)
    third = _round(21_000)
    # offset 150 was appended halfway between the rounds at 1 s and 11 s: 15 s before 21 s
    assert third["partitions"][0]["lagSeconds"] == 15.0 and third["lagBytes"] == 5_400
    shown = next(g for g in kafka_groups()["groups"] if g["group"] == "billing")
    assert (shown["status"], shown["lagBytes"], shown["lagSeconds"]) == ("OK", 5_400, 15.0)
    assert shown["partitions"][0]["lagSeconds"] == 15.0 and shown["lag"] == 50


def test_the_status_goes_warn_stall_stop_and_err() -> None:
    _commit(0, 0)
    at, end = 0, 0
    for i in range(5):  # (the consumer commits, slower than the end grows: the lag grows)
        at, end = at + 10_000, end + 100
        _commit(0, 10 * i)
        _report({"orders/0": end}, {"orders/0": end * 10}, [MEMBER])
        judged = _round(at)
    assert judged["status"] == "WARN", judged
    for _ in range(10):  # (nothing appended, nothing committed: the offsets unmoved)
        at += 10_000
        judged = _round(at)
    assert judged["status"] == "STALL" and "460 records unread" in judged["reason"]
    _report({"orders/0": end}, {"orders/0": end * 10}, [])
    assert _round(at + 10_000)["status"] == "STOP"
    _report({}, {}, [MEMBER])  # (a member, and no node reporting the partition's end)
    err = _round(at + 20_000)
    assert err["status"] == "ERR" and "orders/0" in err["reason"] and err["lagBytes"] == 0


def test_a_round_drops_the_rows_of_groups_gone() -> None:
    KafkaGroupLag.objects.create(group="gone")
    _commit(0, 5)
    _report({"orders/0": 5}, {"orders/0": 50}, [MEMBER])
    _round(1_000)
    assert list(KafkaGroupLag.objects.values_list("group", flat=True)) == ["billing"]
