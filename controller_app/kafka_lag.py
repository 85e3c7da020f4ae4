"""Kafka consumer groups in the lag round, judged as reader groups are (``controller_app.lag``).

The lag round (the beat job, every ``MILLRACE_LAG_PERIOD_S``) measures every Kafka consumer
group after the reader groups and keeps the result in its ``KafkaGroupLag`` row, which REST,
the CLI, the console and the metrics read (``controller_app.kafka_catalog.kafka_groups``). A
group is every group that committed an offset or that a node's listener coordinates. Per
partition it committed, from the nodes' fresh reports (no segment store is asked):

* **records**: the partition's end offset less the offset committed.
* **bytes**: the records times the partition's mean stored record size (the bytes before its
  end over its records, Millrace's framing of each record counted); exact for records of one
  size. Null while no node reports the partition's end.
* **seconds**: how long ago the oldest record not committed was appended: when the partition's
  end passed the committed offset, interpolated between the ends the rounds saw (an hour of
  them, as kafka-lag-exporter does).

**Status** is Burrow's, judged by ``controller_app.lag.judge`` over the same window: ``ERR``
when a partition's end is not reported while the group has members (no node's listener has
it open), ``STOP`` with no member, ``STALL`` when its committed offsets did not move in the
whole window with records unread, ``WARN`` when the lag grew in each round of it, ``OK``
otherwise.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction

from controller_app.kafka_catalog import Reported, committed_offsets, reported
from controller_app.lag import WINDOW, add_point, age_ms, judge
from controller_app.models import KafkaCommittedOffset, KafkaGroupLag

__all__ = ["measure_kafka_group", "measure_kafka_groups"]


def measure_kafka_group(
    row: KafkaGroupLag, offsets: list[KafkaCommittedOffset], seen: Reported, at_ms: int
) -> dict[str, Any]:
    """Measure the group of ``row`` (not saved) from its committed ``offsets`` and what the
    nodes reported: the report, one more sample, the status."""
    members = seen.live.get(row.group, {}).get("members", [])
    tails: dict[str, list[list[int]]] = {}
    partitions: list[dict[str, Any]] = []
    error: str | None = None
    for offset in offsets:
        key = f"{offset.topic}/{offset.partition}"
        end = seen.ends.get(key)
        place = {"topic": offset.topic, "partition": offset.partition, "committed": offset.offset}
        if end is None:
            if members:
                error = error or f"the end of partition {key} is not reported (its node?)"
            partitions.append({**place, "end": None, "lag": None, "lagBytes": None,
                               "lagSeconds": None})  # fmt: skip
            continue
        tails[key] = add_point(row.tails.get(key, []), at_ms, end)
        unread = max(end - offset.offset, 0)
        size = seen.sizes.get(key)
        per_record = size / end if size and end else None
        lag_bytes = round(unread * per_record) if per_record else (0 if not unread else None)
        seconds = age_ms(tails[key], offset.offset, at_ms) / 1000
        partitions.append({**place, "end": end, "lag": unread, "lagBytes": lag_bytes,
                           "lagSeconds": seconds})  # fmt: skip
    known = [p for p in partitions if p["lag"] is not None]
    lag = sum(p["lag"] for p in known)
    sample = {"at": at_ms, "lag": lag, "read": sum(o.offset for o in offsets),
              **({"error": error} if error else {})}  # fmt: skip
    row.samples = [*row.samples[-(WINDOW - 1) :], sample]
    row.tails = tails
    row.status, reason = judge(row.samples, len(members), unit="records", who="member")
    row.computed_at_ms = at_ms
    sized = [p["lagBytes"] for p in known]
    row.report = {
        "status": row.status, "reason": reason, "computedAtMs": at_ms, "members": len(members),
        "windowRounds": len(row.samples), "lag": lag,
        "lagBytes": None if None in sized else sum(sized),
        "lagSeconds": max((p["lagSeconds"] for p in known), default=0.0),
        "partitions": partitions,
    }  # fmt: skip
    report: dict[str, Any] = row.report
    return report


def measure_kafka_groups(at_ms: int, deadline: float) -> int:
    """Measure every Kafka consumer group (``lag_round``'s ``also``) until ``deadline``
    (``time.monotonic()``); how many. The rows of groups gone are deleted."""
    seen = reported()
    committed = committed_offsets()
    names = sorted(set(seen.live) | set(committed))
    measured = 0
    for name in names:
        if time.monotonic() > deadline:
            break
        with transaction.atomic():
            row, _ = KafkaGroupLag.objects.select_for_update().get_or_create(group=name)
            measure_kafka_group(row, committed.get(name, []), seen, at_ms)
            row.save()
        measured += 1
    KafkaGroupLag.objects.exclude(group__in=names).delete()
    return measured
