"""The controller's Prometheus metrics, read from its metadata at each scrape.

``django-prometheus`` gives the HTTP side (requests, latencies, responses by status) through
its middleware; ``MetadataCollector`` adds what the workflows and the periodic
rounds leave in the database, whichever process ran them (the Celery workers count nothing in
the controller's memory): streams by state, scales by state (manual and automatic), retention
truncations, transactions by state, each stream's watermark lag, the age of each worker's and
beat's heartbeat, the workflow tasks' outcomes (``TaskCount``, counted by the workers), and each
reader group's lag and status as the last lag round measured them (``controller_app.lag``), and
what the canary last saw of each node (``controller_app.operations.canary``), and each scope's
quotas, stored bytes, and the rates and throttle time its nodes reported
(``controller_app.quotas``). A handful of grouped queries per scrape, none per stream or group.
``DETAIL`` holds what has a series per reader (``/metrics?detail=1``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db.models import Count, Max
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from controller_app.models import (
    CanaryProbe,
    EpochTransition,
    ProcessHeartbeat,
    QuotaUsage,
    ReaderGroupLag,
    ScopeQuota,
    Stream,
    TaskCount,
    Transaction,
    TruncationRecord,
    Watermark,
)
from controller_app.quotas import LIMITS
from millrace.kernel.metrics_port import BuildInfo, CertificateEnd


def _by(model: Any, field: str) -> dict[str, int]:
    rows = model.objects.values(field).annotate(n=Count("pk")).values_list(field, "n")
    return {str(key): int(n) for key, n in rows}


class MetadataCollector(Collector):
    def describe(self) -> Iterator[Any]:
        """The metric names, without a query (prometheus-client asks at registration)."""
        yield GaugeMetricFamily("millrace_streams", "", labels=["state"])
        yield CounterMetricFamily("millrace_scales", "", labels=["state"])
        yield CounterMetricFamily("millrace_truncations", "")
        yield GaugeMetricFamily("millrace_transactions", "", labels=["state"])
        yield GaugeMetricFamily("millrace_watermark_lag_seconds", "", labels=["stream"])
        yield GaugeMetricFamily("millrace_heartbeat_age_seconds", "", labels=["role", "process"])
        yield CounterMetricFamily("millrace_workflow_tasks", "", labels=["task", "outcome"])
        yield from _lag_families().values()
        yield from _canary_families().values()
        yield from _quota_families().values()
        yield from _kafka_families().values()

    def collect(self) -> Iterator[Any]:
        streams = GaugeMetricFamily("millrace_streams", "Streams by state.", labels=["state"])
        for state, n in _by(Stream, "state").items():
            streams.add_metric([state], n)
        yield streams
        scales = CounterMetricFamily(
            "millrace_scales", "Scales requested (by hand or by auto-scaling), by state.",
            labels=["state"],
        )  # fmt: skip
        for state, n in _by(EpochTransition, "state").items():
            scales.add_metric([state], n)
        yield scales
        truncations = CounterMetricFamily(
            "millrace_truncations", "Truncations (by hand or by retention)."
        )
        truncations.add_metric([], TruncationRecord.objects.count())
        yield truncations
        txns = GaugeMetricFamily(
            "millrace_transactions", "Transactions not yet completed, by state.", labels=["state"]
        )
        for state, n in _by(Transaction, "state").items():
            txns.add_metric([state], n)
        yield txns
        lag = GaugeMetricFamily(
            "millrace_watermark_lag_seconds",
            "Now less the lower time bound of the stream's newest watermark.",
            labels=["stream"],
        )
        now = time.time()
        newest = (
            Watermark.objects.values("stream__scope__name", "stream__name")
            .annotate(low=Max("low_time"))
            .values_list("stream__scope__name", "stream__name", "low")
        )
        for scope, name, low in newest:
            lag.add_metric([f"{scope}/{name}"], max(0.0, now - low / 1000))
        yield lag
        age = GaugeMetricFamily(
            "millrace_heartbeat_age_seconds",
            "Seconds since each worker's or beat's last heartbeat.",
            labels=["role", "process"],
        )
        at = timezone.now()
        for role, process, beat_at in ProcessHeartbeat.objects.values_list(
            "role", "process", "beat_at"
        ):
            age.add_metric([role, process], (at - beat_at).total_seconds())
        yield age
        tasks = CounterMetricFamily(
            "millrace_workflow_tasks",
            "Workflow task runs by how they ended (ok, retry, failed), counted by the workers.",
            labels=["task", "outcome"],
        )
        for task, outcome, count in TaskCount.objects.values_list("task", "outcome", "count"):
            tasks.add_metric([task, outcome], count)
        yield tasks
        yield from _lags()
        yield from _canaries()
        yield from _quotas()
        yield from _kafka_groups()


_GROUP = ["scope", "readergroup"]
_LAGS = {
    "lagBytes": ("millrace_readergroup_lag_bytes", "Bytes the group has not read yet."),
    "lagEvents": ("millrace_readergroup_lag_events",
                  "Events the group has not read yet (estimated from the segments' mean event"
                  " size; absent when not known)."),
    "lagSeconds": ("millrace_readergroup_lag_seconds",
                   "How long ago the oldest event the group has not read was appended."),
}  # fmt: skip


def _lag_families() -> dict[str, Any]:
    families: dict[str, Any] = {
        key: GaugeMetricFamily(name, text, labels=_GROUP) for key, (name, text) in _LAGS.items()
    }
    families["status"] = GaugeMetricFamily(
        "millrace_readergroup_status",
        "1 for the group's status (OK, WARN, STALL, STOP, ERR), 0 for the others.",
        labels=[*_GROUP, "status"],
    )
    families["readers"] = GaugeMetricFamily(
        "millrace_readergroup_readers_online", "Readers of the group online.", labels=_GROUP
    )
    families["age"] = GaugeMetricFamily(
        "millrace_readergroup_lag_measured_age_seconds",
        "Seconds since the lag round last measured the group.", labels=_GROUP,
    )  # fmt: skip
    return families


def _lags() -> Iterator[Any]:
    from controller_app.lag import STATUSES

    families = _lag_families()
    now = time.time()
    rows = ReaderGroupLag.objects.values_list(
        "group__scope__name", "group__name", "status", "computed_at_ms", "report"
    )
    for scope, name, status, at_ms, report in rows:
        labels = [scope, name]
        for key in _LAGS:
            if report.get(key) is not None:
                families[key].add_metric(labels, report[key])
        for each in STATUSES:
            families["status"].add_metric([*labels, each], 1.0 if each == status else 0.0)
        families["readers"].add_metric(labels, report.get("readersOnline", 0))
        families["age"].add_metric(labels, max(now - at_ms / 1000, 0.0))
    yield from families.values()


def _canary_families() -> dict[str, Any]:
    node = ["node"]
    return {
        "ack": GaugeMetricFamily(
            "millrace_canary_ack_seconds",
            "The canary's last event to the node: from the write to its acknowledgement.",
            labels=node,
        ),
        "read": GaugeMetricFamily(
            "millrace_canary_read_seconds",
            "The canary's last event to the node: from the write to reading it back.",
            labels=node,
        ),
        "ok": CounterMetricFamily(
            "millrace_canary_successes", "Canary rounds that wrote to and read from the node.",
            labels=node,
        ),
        "failed": CounterMetricFamily(
            "millrace_canary_failures", "Canary rounds that failed on the node.", labels=node
        ),
        "age": GaugeMetricFamily(
            "millrace_canary_success_age_seconds",
            "Seconds since the canary last wrote to and read from the node.", labels=node,
        ),
    }  # fmt: skip


def _canaries() -> Iterator[Any]:
    families = _canary_families()
    at = timezone.now()
    for probe in CanaryProbe.objects.all():
        labels = [probe.node]
        if probe.ack_seconds is not None and probe.read_seconds is not None:
            families["ack"].add_metric(labels, probe.ack_seconds)
            families["read"].add_metric(labels, probe.read_seconds)
        families["ok"].add_metric(labels, probe.successes)
        families["failed"].add_metric(labels, probe.failures)
        since = probe.succeeded_at or probe.probed_at
        families["age"].add_metric(labels, (at - since).total_seconds())
    yield from families.values()


def _quota_families() -> dict[str, Any]:
    return {
        "limit": GaugeMetricFamily(
            "millrace_scope_quota", "A scope's quota (per second for rates).",
            labels=["scope", "limit"],
        ),
        "throttle": CounterMetricFamily(
            "millrace_scope_throttle_seconds",
            "Seconds a node delayed a scope's acknowledgements and reads for its rate quotas"
            " (since the node started).", labels=["scope", "node"],
        ),
        "rate": GaugeMetricFamily(
            "millrace_scope_rate", "What a node let through of a scope last second (per second).",
            labels=["scope", "node", "kind"],
        ),
        "stored": GaugeMetricFamily(
            "millrace_scope_stored_bytes",
            "A scope's stored bytes, as the last quota round measured them.", labels=["scope"],
        ),
    }  # fmt: skip


def _quotas() -> Iterator[Any]:
    families = _quota_families()
    for quota in ScopeQuota.objects.select_related("scope"):
        scope = quota.scope.name
        for name in LIMITS:
            value = getattr(quota, name)
            if value is not None:
                families["limit"].add_metric([scope, name], float(value))
        if quota.stored_bytes is not None:
            families["stored"].add_metric([scope], float(quota.stored_bytes_used))
    for row in QuotaUsage.objects.all():
        families["throttle"].add_metric([row.scope, row.node], row.throttle_seconds)
        for kind in ("append_bytes_per_s", "append_events_per_s", "read_bytes_per_s"):
            families["rate"].add_metric([row.scope, row.node, kind], getattr(row, kind))
    yield from families.values()


def _kafka_families() -> dict[str, Any]:
    return {
        "lag": GaugeMetricFamily(
            "millrace_kafka_group_lag_records",
            "Records of a partition a Kafka consumer group has not committed yet.",
            labels=["group", "topic", "partition"],
        ),
        "members": GaugeMetricFamily(
            "millrace_kafka_group_members", "Members of a Kafka consumer group.", labels=["group"]
        ),
        "lagBytes": GaugeMetricFamily(
            "millrace_kafka_group_lag_bytes",
            "Bytes a Kafka consumer group has not committed yet (the records times their"
            " partitions' mean stored size; absent when not known).", labels=["group"],
        ),
        "lagSeconds": GaugeMetricFamily(
            "millrace_kafka_group_lag_seconds",
            "How long ago the oldest record a Kafka consumer group has not committed was"
            " appended.", labels=["group"],
        ),
        "status": GaugeMetricFamily(
            "millrace_kafka_group_status",
            "1 for the Kafka consumer group's status (OK, WARN, STALL, STOP, ERR), 0 for the"
            " others.", labels=["group", "status"],
        ),
    }  # fmt: skip


def _kafka_groups() -> Iterator[Any]:
    from controller_app.kafka_catalog import kafka_groups
    from controller_app.lag import STATUSES

    families = _kafka_families()
    for group in kafka_groups()["groups"]:
        families["members"].add_metric([group["group"]], len(group["members"]))
        for key in ("lagBytes", "lagSeconds"):
            if group[key] is not None:
                families[key].add_metric([group["group"]], group[key])
        if group["status"] is not None:
            for each in STATUSES:
                families["status"].add_metric([group["group"], each],
                                              1.0 if each == group["status"] else 0.0)  # fmt: skip
        for p in group["partitions"]:
            if p["lag"] is not None:
                labels = [group["group"], p["topic"], str(p["partition"])]
                families["lag"].add_metric(labels, p["lag"])
    yield from families.values()


class ReaderDetail(Collector):
    """Each reader's lag (``/metrics?detail=1``): a series per reader, which can be many."""

    def describe(self) -> Iterator[Any]:
        yield GaugeMetricFamily("millrace_reader_lag_bytes", "", labels=[*_GROUP, "reader"])

    def collect(self) -> Iterator[Any]:
        family = GaugeMetricFamily(
            "millrace_reader_lag_bytes", "Bytes a reader of the group has not read yet.",
            labels=[*_GROUP, "reader"],
        )  # fmt: skip
        rows = ReaderGroupLag.objects.values_list("group__scope__name", "group__name", "report")
        for scope, name, report in rows:
            for reader in report.get("readers", ()):
                family.add_metric([scope, name, reader["readerId"]], reader["lagBytes"])
        yield family


#: The detail series, apart from the default registry.
DETAIL = CollectorRegistry(auto_describe=True)
DETAIL.register(ReaderDetail())

_registered: list[MetadataCollector] = []


def register() -> None:
    """Add the collector to prometheus-client's default registry, once per process."""
    if not _registered:
        collector = MetadataCollector()
        REGISTRY.register(collector)
        REGISTRY.register(BuildInfo())
        _registered.append(collector)
        tls = settings.MILLRACE_TLS
        if tls.enabled and tls.cert_file:
            REGISTRY.register(CertificateEnd(tls.cert_file))
