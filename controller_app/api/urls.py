"""Paths of the REST API (mounted at ``/v1/`` by ``millrace.project.urls``)."""

from __future__ import annotations

from django.urls import path, register_converter

from controller_app.api import acl_views as acl
from controller_app.api import kvtables as kvt
from controller_app.api import reader_groups as rg
from controller_app.api import views as v
from controller_app.api.cluster_views import ClusterView
from controller_app.api.events import EventsView
from controller_app.api.kafka_views import KafkaGroupsView
from controller_app.api.metrics_views import ScrapeTargetsView
from controller_app.api.quota_views import QuotaView
from millrace.kernel.naming import EPOCH_MAX, segment_epoch


class SegmentIdConverter:
    """A 64-bit segment id whose creation epoch is a real epoch (else the path is a 404)."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number >= 2**63 or segment_epoch(number) > EPOCH_MAX:
            raise ValueError(value)
        return number

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(SegmentIdConverter, "segment")

STREAM = "scopes/<str:scope>/streams/<str:stream>"
TXN = f"{STREAM}/transactions/<str:txn_id>"
RG = "scopes/<str:scope>/readergroups/<str:reader_group>"
KVT = "scopes/<str:scope>/kvtables/<str:kvtable>"

urlpatterns = [
    path("cluster", ClusterView.as_view()),
    path("kafka/groups", KafkaGroupsView.as_view()),
    path("metrics/targets", ScrapeTargetsView.as_view()),
    path("acl", acl.GrantsView.as_view()),
    path("acl/revoke", acl.RevokeView.as_view()),
    path("acl/check", acl.CheckView.as_view()),
    path("acl/members", acl.MembersView.as_view()),
    path("acl/import", acl.ImportView.as_view()),
    path("scopes", v.ScopesView.as_view()),
    path("scopes/<str:scope>", v.ScopeView.as_view()),
    path("scopes/<str:scope>/quota", QuotaView.as_view()),
    path("scopes/<str:scope>/streams", v.StreamsView.as_view()),
    path(STREAM, v.StreamView.as_view()),
    path(f"{STREAM}/state", v.StreamStateView.as_view()),
    path(f"{STREAM}/schema", v.StreamSchemaView.as_view()),
    path(f"{STREAM}/scaling-events", v.ScalingEventsView.as_view()),
    path("scopes/<str:scope>/readergroups", rg.ReaderGroupsView.as_view()),
    path(RG, rg.ReaderGroupView.as_view()),
    # Millrace's additions
    path(f"{STREAM}/info", v.StreamInfoView.as_view()),
    path(f"{STREAM}/segments", v.SegmentsView.as_view()),
    path(f"{STREAM}/segments/<segment:segment_id>", v.SegmentView.as_view()),
    path(f"{STREAM}/segments/<segment:segment_id>/successors", v.SuccessorsView.as_view()),
    path(f"{STREAM}/segments/<segment:segment_id>/uri", v.SegmentUriView.as_view()),
    path(f"{STREAM}/segments-between", v.SegmentsBetweenView.as_view()),
    path(f"{STREAM}/stream-cut/validity", v.StreamCutValidityView.as_view()),
    path(f"{STREAM}/stream-cut/size", v.StreamSizeView.as_view()),
    path(f"{STREAM}/stream-cut/next", v.NextStreamCutView.as_view()),
    path(f"{STREAM}/scale", v.ScaleView.as_view()),
    path(f"{STREAM}/truncate", v.TruncateView.as_view()),
    path(f"{STREAM}/transactions", v.TransactionsView.as_view()),
    path(f"{STREAM}/transactions/commit", v.TransactionsCommitView.as_view()),  # (not an id)
    path(TXN, v.TransactionView.as_view()),
    path(f"{TXN}/ping", v.TransactionPingView.as_view()),
    path(f"{TXN}/commit", v.TransactionCommitView.as_view()),
    path(f"{TXN}/abort", v.TransactionAbortView.as_view()),
    path(f"{STREAM}/writer-marks", v.WriterMarksView.as_view()),
    path(f"{STREAM}/watermark", v.WatermarkView.as_view()),
    path(f"{STREAM}/metrics", v.StreamMetricsView.as_view()),
    path(f"{STREAM}/delegation-token", v.DelegationTokenView.as_view()),
    path(f"{STREAM}/events", EventsView.as_view()),
    path(f"{RG}/lag", rg.LagView.as_view()),
    path(f"{RG}/reset", rg.ResetView.as_view()),
    path(f"{RG}/readers", rg.ReadersView.as_view()),
    path(f"{RG}/readers/<str:reader>", rg.ReaderView.as_view()),
    path(f"{RG}/readers/<str:reader>/sync", rg.SyncView.as_view()),
    path(f"{RG}/checkpoints", rg.CheckpointsView.as_view()),
    path(f"{RG}/checkpoints/<str:checkpoint>", rg.CheckpointView.as_view()),
    path(f"{RG}/subscriber-stream-cuts", rg.SubscriberCutsView.as_view()),
    path("scopes/<str:scope>/kvtables", kvt.KvtsView.as_view()),
    path(KVT, kvt.KvtView.as_view()),
    path(f"{KVT}/delegation-token", kvt.KvtTokenView.as_view()),
    path(f"{KVT}/entries", kvt.EntriesView.as_view()),
    path(f"{KVT}/entries/<path:key>", kvt.EntryView.as_view()),
]
