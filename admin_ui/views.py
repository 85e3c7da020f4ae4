"""The console's pages (GET): one view per page, reading through ``controller_app.selectors``
(and the segment store port for sizes and events) exactly as the REST views do.

Every page keeps its browsing state in its URL (filters, sort, page, tab, start position), so
a view can be bookmarked and shared. Lists paginate; each page makes a fixed number of queries
whatever the number of streams or epochs (``tests/console/test_pages.py``).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import time
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone

from admin_ui import charts
from admin_ui.actions import stream_fields
from admin_ui.console import context, error_words, page, paginate, parse_when
from controller_app import lag, quotas
from controller_app import selectors as sel
from controller_app.access import grants
from controller_app.api.serializers import StreamPropertySerializer
from controller_app.choices import SchemaEnforcement
from controller_app.cluster.status import cluster_status, moves_over_time
from controller_app.errors import ControllerError, NoWatermarkError
from controller_app.models import AuditEntry, ReaderGroup, Scope, Stream
from controller_app.operations.health import node_health
from controller_app.reader_group_state import GroupState, split_key
from controller_app.registry.decoding import EventDecoder
from controller_app.segment_client import read_node_metrics, read_traffic, segment_store
from controller_app.segments import Segment
from controller_app.stream_reads import find_events, newest_events, start_cut
from controller_app.workflows import marks, transactions
from controller_app.workflows import reader_groups as rg
from controller_app.workflows.scopes import get_scope
from millrace.client.streamcut import StreamCut
from millrace.kernel.quotas import QUOTA_LIMITS

#: Epochs per page of a stream's history chart.
EPOCHS_PER_PAGE = 50
#: The stream page's tabs: URL value, label.
STREAM_TABS = [
    ("segments", "Segments"),
    ("history", "Epoch history"),
    ("retention", "Truncation, retention, watermark"),
    ("transactions", "Transactions"),
    ("readers", "Reader groups"),
]
#: Where the event browser starts: URL value, label.
EVENT_STARTS = [
    ("newest", "the newest events (of every segment, by append time)"),
    ("head", "the head (oldest kept)"),
    ("tail", "the tail (only new events)"),
    ("cut", "a stream cut"),
    ("time", "a time"),
]
#: Events the event browser shows by default, and at most.
EVENTS_DEFAULT, EVENTS_MAX = 100, 2_000


def _stream(scope: str, name: str) -> Stream:
    try:
        return sel.get_stream(scope, name)
    except Stream.DoesNotExist:
        raise Http404(f"stream {scope}/{name} does not exist") from None


def _scope(name: str) -> Scope:
    try:
        return get_scope(name)
    except ControllerError:
        raise Http404(f"scope {name} does not exist") from None


def _stream_rates(names: list[str]) -> dict[str, tuple[float, float]]:
    """``scope/stream`` -> (events/s, bytes/s) summed over its segments, from the monitors."""
    wanted = set(names)
    rates: dict[str, tuple[float, float]] = {}
    for segment, found in read_traffic().segments.items():
        owner = segment.rsplit("/", 1)[0]
        if owner in wanted:
            events, size = rates.get(owner, (0.0, 0.0))
            rates[owner] = (events + found.events_per_s, size + found.bytes_per_s)
    return rates


# -- dashboard ----------------------------------------------------------------------------------


@page(listing=True)
def dashboard(request: HttpRequest) -> HttpResponse:
    if not grants.allowed(request.user, grants.ROOT, grants.READ):
        return HttpResponseRedirect(reverse("console:scopes"))  # (a team's user: its scopes)
    recent = sel.audit_entries(action="stream.").filter(
        action__in=["stream.scale", "stream.truncate"]
    )
    return render(
        request,
        "admin_ui/dashboard.html",
        context(
            request,
            nodes=sel.nodes_with_containers(),
            workflows=sel.workflow_counts(),
            busy=sel.busy_streams(),
            recent=list(recent[:12]),
        ),
    )


@page
def dashboard_health(request: HttpRequest) -> HttpResponse:
    """The node's health tree (htmx fragment, refreshed every few seconds)."""
    return render(request, "admin_ui/_health.html", {"health": node_health().as_json()})


@page
def dashboard_live(request: HttpRequest) -> JsonResponse:
    """The numbers the dashboard's live charts plot (polled): counters summed over nodes, and
    the append rates over the console's one rate window (the traffic monitors', as every page
    shows them)."""
    nodes = read_node_metrics()
    totals: dict[str, float] = {}
    for found in nodes.values():
        for key, value in (found or {}).items():
            totals[key] = totals.get(key, 0.0) + value
    traffic = read_traffic().segments.values()
    return JsonResponse(
        {
            "time": time.time(),
            "totals": totals,
            "nodesDown": [n for n, v in nodes.items() if v is None],
            "windowSeconds": settings.MILLRACE.autoscale_window_s,
            "eventsPerSecond": sum(t.events_per_s for t in traffic),
            "bytesPerSecond": sum(t.bytes_per_s for t in traffic),
        }
    )


# -- cluster ------------------------------------------------------------------------------------


@page
def cluster(request: HttpRequest) -> HttpResponse:
    """Nodes, their sessions and containers, the leader, what the canary last saw of each
    node, the latest moves, and a chart of the containers each node held over those moves;
    ``?part=tables`` is the tables alone (htmx refreshes them every few seconds)."""
    found = cluster_status()
    canary = sel.canary_probes()
    if request.GET.get("part") == "tables":
        return render(request, "admin_ui/_cluster_tables.html",
                      {"cluster": found, "canary": canary})  # fmt: skip
    times, series = moves_over_time(found)
    chart = {"times": [dt.datetime.fromisoformat(t).timestamp() for t in times],
             "series": series}  # fmt: skip
    return render(
        request,
        "admin_ui/cluster.html",
        context(request, cluster=found, chart=chart, canary=canary),
    )


# -- scopes -------------------------------------------------------------------------------------


@page(listing=True)
def scopes(request: HttpRequest) -> HttpResponse:
    rows = sel.scope_listing()
    if not grants.sees_everything(request.user):
        rows = grants.visible(request.user, rows, lambda row: grants.scope_resource(row.name))
    found = paginate(request, rows)
    return render(request, "admin_ui/scopes.html", context(request, page=found))


# -- streams ------------------------------------------------------------------------------------


@page
def streams(request: HttpRequest, scope: str) -> HttpResponse:
    scope_row = _scope(scope)
    text, tag = request.GET.get("q", "").strip(), request.GET.get("tag", "")
    sort = request.GET.get("sort", "name")
    if sort not in sel.STREAM_SORTS:
        sort = "name"
    rows = sel.stream_listing(scope_row, text=text, tag=tag, sort=sort)
    if not grants.sees_everything(request.user):
        rows = grants.visible(request.user, rows, lambda r: grants.stream_prn(scope, r.name))
    found = paginate(request, rows)
    rows = list(found.object_list)
    tags = sel.tags_of(rows)
    rates = _stream_rates([r.scoped_name for r in rows]) if rows else {}
    table = [
        {
            "stream": r,
            "segments": len(r.segment_list or ()),  # type: ignore[attr-defined]
            "size": r.size,  # type: ignore[attr-defined]
            "tags": tags.get(r.pk, []),
            "rate": rates.get(r.scoped_name, (0.0, 0.0)),
        }
        for r in rows
    ]
    quota = quotas.quota_of(scope_row)
    values = context(
        request,
        scope=scope_row,
        quota=quota,
        quota_rows=quota_rows(quota),
        page=found,
        table=table,
        q=text,
        tag=tag,
        sort=sort,
        sorts=list(sel.STREAM_SORTS),
        all_tags=sel.scope_tags(scope_row),
    )
    template = "admin_ui/_stream_table.html" if request.htmx else "admin_ui/streams.html"  # type: ignore[attr-defined]
    return render(request, template, values)


def quota_rows(quota: dict[str, Any]) -> list[dict[str, Any]]:
    """Each limit of a scope's quota with its use, and the part used where both are known."""
    rows = []
    for row in QUOTA_LIMITS:
        field, label = row.field, row.label
        limit, used = quota["limits"][field], quota["used"][field]
        ratio = min(used / limit, 1.0) if limit and used is not None else None
        rows.append({"field": field, "label": label, "limit": limit, "used": used,
                     "ratio": ratio})  # fmt: skip
    return rows


@page
def stream_new(request: HttpRequest, scope: str) -> HttpResponse:
    scope_row = _scope(scope)
    return render(
        request,
        "admin_ui/stream_form.html",
        context(request, scope=scope_row, fieldsets=stream_fields({}, {}, True), editing=None),
    )


def form_values_of(stream: Stream, tags: list[str]) -> dict[str, str]:
    """A stream's configuration as the stream form's fields (the REST API's names)."""
    data = StreamPropertySerializer.of(stream, tags)
    values = {"streamName": stream.name, "streamTags": ", ".join(tags)}
    for key, value in (data.get("scalingPolicy") or {}).items():
        values[f"scalingPolicy.{key}"] = str(value)
    retention = data.get("retentionPolicy") or {}
    values["retentionPolicy.type"] = retention.get("type", "")
    for key in ("value", "maxValue"):
        if retention.get(key):
            values[f"retentionPolicy.{key}"] = str(retention[key])
    return values


@page
def stream_edit(request: HttpRequest, scope: str, stream: str) -> HttpResponse:
    row = _stream(scope, stream)
    return render(
        request,
        "admin_ui/stream_form.html",
        context(
            request,
            scope=row.scope,
            fieldsets=stream_fields(form_values_of(row, sel.stream_tags(row)), {}, False),
            editing=row,
        ),
    )


def _segment_rows(stream: Stream, segments: tuple[Segment, ...]) -> list[dict[str, Any]]:
    traffic = read_traffic().segments
    store = segment_store()
    rows = []
    for g in sorted(segments, key=lambda g: g.key_start):
        name = sel.segment_name(stream, g.id)
        found = traffic.get(name)
        try:
            state = store.info(name)
            size: int | None = state.length - state.start_offset
            length: int | None = state.length
        except Exception:  # the segment store is away: the page still shows the metadata
            size = length = None
        rows.append(
            {
                "segment": g,
                "name": name,
                "size": size,
                "length": length,
                "events_per_s": found.events_per_s if found else 0.0,
                "bytes_per_s": found.bytes_per_s if found else 0.0,
            }
        )
    return rows


@page
def stream_detail(request: HttpRequest, scope: str, stream: str) -> HttpResponse:
    row = _stream(scope, stream)
    segments = sel.current_segments(row)
    segment_rows = _segment_rows(row, segments)
    before_text = request.GET.get("epochs_before", "")
    before = int(before_text) if before_text.isdigit() else None
    epochs = sel.epoch_page(row, before, EPOCHS_PER_PAGE)
    history = charts.epoch_history([(e.epoch, e.creation_time, e.segment_list()) for e in epochs])
    try:
        watermark = marks.latest_watermark(scope, stream).as_json()
    except NoWatermarkError:
        watermark = None
    head = sel.head_segments(row)
    head_text = StreamCut(scope, stream, {g.id: o for g, o in head.items()}).to_text()
    txns = [
        {"txn": t, "id": transactions.transaction_uuid(t)}
        for t in sel.live_transactions(row.scope, row)
    ]
    return render(
        request,
        "admin_ui/stream_detail.html",
        context(
            request,
            stream=row,
            scope=row.scope,
            tags=sel.stream_tags(row),
            segments=segment_rows,
            bar=charts.keyspace_bar(
                segments, {r["segment"].id: r["events_per_s"] for r in segment_rows}
            ),
            bar_size=(charts.BAR_WIDTH, charts.BAR_HEIGHT),
            history=history,
            history_size=(charts.HISTORY_WIDTH, charts.HISTORY_HEIGHT),
            older=epochs[0].epoch if epochs and epochs[0].epoch > 0 else None,
            newer=(epochs[-1].epoch + EPOCHS_PER_PAGE + 1)
            if epochs and epochs[-1].epoch < row.current_epoch
            else None,
            head=head_text,
            enforcement_choices=SchemaEnforcement.choices,
            controller=request.build_absolute_uri("/").rstrip("/"),
            retention=sel.retention_set(row),
            watermark=watermark,
            transactions=txns,
            reader_groups=sel.reader_groups_reading(row),
            tab=request.GET.get("tab", "segments"),
            tab_names=STREAM_TABS,
        ),
    )


# -- find ----------------------------------------------------------------------------------------

#: Streams the dashboard's search lists at most.
FIND_SHOWN = 50


@page(listing=True)
def find(request: HttpRequest) -> HttpResponse:
    """The dashboard's search: ``scope/stream`` (or a part of a name). One stream found opens
    its newest events at once; several are listed, each with its events one click away."""
    text = request.GET.get("q", "").strip()
    found: list[Stream] = []
    if text:
        scope_part, _, stream_part = text.rpartition("/")
        exact = Stream.objects.filter(scope__name=scope_part, name=stream_part).first()
        readable = exact is not None and grants.allowed(
            request.user, grants.stream_prn(scope_part, stream_part), grants.READ
        )
        if exact is not None and readable:
            return redirect("console:events", exact.scope.name, exact.name)
        words = Q(name__icontains=text) | Q(scope__name__icontains=text)
        if scope_part:
            words |= Q(scope__name__icontains=scope_part, name__icontains=stream_part)
        found = list(
            Stream.objects.filter(words)
            .select_related("scope")
            .order_by("scope__name", "name")[: FIND_SHOWN + 1]
        )
        found = grants.visible(
            request.user, found, lambda r: grants.stream_prn(r.scope.name, r.name)
        )
        if len(found) == 1:
            return redirect("console:events", found[0].scope.name, found[0].name)
    return render(
        request,
        "admin_ui/find.html",
        context(request, q=text, found=found[:FIND_SHOWN], more=len(found) > FIND_SHOWN),
    )


# -- events ---------------------------------------------------------------------------------------


def _start(request: HttpRequest) -> str:
    """The event browser's start as ``start_cut`` takes it, from the URL's fields."""
    kind = request.GET.get("from", "newest")
    if kind == "cut":
        return request.GET.get("cut", "").strip()
    if kind == "time":
        when = parse_when(request.GET.get("time", ""))
        if when is None:
            return "time:bad"
        return f"time:{int(when.timestamp() * 1000)}"
    return kind if kind in ("head", "tail") else "head"


def _as(view: str, data: bytes, decoder: EventDecoder) -> str:
    if view == "schema":
        decoded = decoder.decoded(data)
        if "value" not in decoded:
            return f"(not decoded: {decoded['decodeError']})"
        value = json.dumps(decoded["value"], indent=2, ensure_ascii=False)
        return f"schema {decoded['schemaId']}: {value}"
    if view == "hex":
        return data.hex(" ")
    text = data.decode("utf-8", errors="replace")
    if view == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


@page
def events(request: HttpRequest, scope: str, stream: str) -> HttpResponse:
    row = _stream(scope, stream)
    kind = request.GET.get("from", "newest")
    view = request.GET.get("view", "text")
    limit_text = request.GET.get("limit", str(EVENTS_DEFAULT))
    limit = int(limit_text) if limit_text.isdigit() else EVENTS_DEFAULT
    limit = max(1, min(limit, EVENTS_MAX))
    text = request.GET.get("q", "")
    error, found = None, None
    try:
        store = segment_store()
        if kind == "newest":
            found = newest_events(store, row, limit, text.encode())
        else:
            cut = start_cut(store, row, _start(request))
            found = find_events(store, row, cut, limit=limit, contains=text.encode())
    except Exception as exc:
        words = error_words(exc)
        if words is None:
            raise
        error = f"{words[1]}: {words[2]}"
    decoder = EventDecoder()
    if view == "schema" and found is not None:
        decoder.load(e.data for _, e in found.events)
    rows = [
        {"segment": sid, "offset": e.offset, "size": len(e.data),
         "shown": _as(view, e.data, decoder), "data": e.data}
        for sid, e in (found.events if found else [])
    ]  # fmt: skip
    download = request.GET.get("download")
    if download in ("json", "csv") and found is not None:
        return _download(row, rows, download)
    continuation = StreamCut(scope, stream, found.position).to_text() if found is not None else ""
    return render(
        request,
        "admin_ui/events.html",
        context(
            request,
            stream=row,
            scope=row.scope,
            rows=rows,
            found=found,
            error=error,
            kind=kind,
            view=view,
            limit=limit,
            q=text,
            cut=request.GET.get("cut", ""),
            time=request.GET.get("time", ""),
            continuation=continuation,
            starts=EVENT_STARTS,
            views=("text", "json", "hex", "schema"),
        ),
        status=400 if error else 200,
    )


def _download(stream: Stream, rows: list[dict[str, Any]], kind: str) -> HttpResponse:
    name = f"{stream.scope.name}-{stream.name}-events.{kind}"
    items = [
        {"segmentId": r["segment"], "offset": r["offset"],
         "data": r["data"].decode("utf-8", errors="replace"), "dataHex": r["data"].hex()}
        for r in rows
    ]  # fmt: skip
    if kind == "json":
        response = HttpResponse(json.dumps(items, indent=1), content_type="application/json")
    else:
        response = HttpResponse(content_type="text/csv")
        writer = csv.DictWriter(response, fieldnames=["segmentId", "offset", "data", "dataHex"])
        writer.writeheader()
        writer.writerows(items)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


# -- reader groups and transactions -------------------------------------------------------------


@page
def reader_groups(request: HttpRequest, scope: str) -> HttpResponse:
    scope_row = _scope(scope)
    shown = grants.visible(request.user, sel.reader_groups_of(scope_row),
                           lambda g: grants.reader_group_resource(scope, g.name))  # fmt: skip
    groups = [{"group": g, "streams": sorted(g.configuration.get("streams", {}))}
              for g in shown]  # fmt: skip
    return render(
        request, "admin_ui/reader_groups.html", context(request, scope=scope_row, groups=groups)
    )


@page
def reader_group(request: HttpRequest, scope: str, reader_group: str) -> HttpResponse:
    name = reader_group
    scope_row = _scope(scope)
    try:
        group = rg.get_reader_group(scope, name)
    except ControllerError:
        raise Http404(f"reader group {scope}/{name} does not exist") from None
    described = rg.describe(group)
    lengths = _segment_lengths(group)
    measured = lag.lag_of(segment_store(), read_traffic, group)
    measured_segments = {
        s["segment"]: s
        for found in [*measured["readers"], {"segments": measured["unassigned"]}]
        for s in found["segments"]
    }
    readers = []
    for reader in described["readers"]:
        seen = dt.datetime.fromtimestamp(reader["lastSeenMs"] / 1000, dt.UTC)
        assigned = _lags(reader["segments"], lengths, measured_segments)
        readers.append({**reader, "assigned": assigned, "seen": seen})
    unassigned = _lags(described["unassignedSegments"], lengths, measured_segments)
    total_lag = sum(a["lag"] or 0 for r in readers for a in r["assigned"]) + sum(
        a["lag"] or 0 for a in unassigned
    )
    return render(
        request,
        "admin_ui/reader_group.html",
        context(
            request,
            scope=scope_row,
            group=group,
            described=described,
            readers=readers,
            unassigned=unassigned,
            total_lag=total_lag,
            measured=measured,
            measured_at=dt.datetime.fromtimestamp(measured["computedAtMs"] / 1000, dt.UTC),
            config=json.dumps(described["configuration"], indent=2),
        ),
    )


def _lags(
    positions: dict[str, int], lengths: dict[str, int], measured: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Per segment key: the reading position, the segment's length and the lag (None when the
    length is not known), with the events and seconds the last lag round measured."""
    rows = []
    for key, offset in sorted(positions.items()):
        length = lengths.get(key)
        lag_bytes = max(length - offset, 0) if length is not None else None
        found = measured.get(key, {})
        rows.append({
            "key": key, "offset": offset, "length": length, "lag": lag_bytes,
            "events": found.get("lagEvents"), "seconds": found.get("lagSeconds"),
        })  # fmt: skip
    return rows


def _segment_lengths(group: ReaderGroup) -> dict[str, int]:
    """Segment key -> its length now, for the segments the group reads."""
    state = GroupState.load(group.sync_state)
    store = segment_store()
    lengths: dict[str, int] = {}
    streams: dict[tuple[str, str], Stream] = {}
    for key in state.positions():
        scope, stream, segment_id = split_key(key)
        try:
            if (scope, stream) not in streams:
                streams[scope, stream] = sel.get_stream(scope, stream)
            row = streams[scope, stream]
            lengths[key] = store.info(sel.segment_name(row, segment_id)).length
        except Exception:  # gone, or the segment store is away: no lag shown
            continue
    return lengths


@page
def scope_transactions(request: HttpRequest, scope: str) -> HttpResponse:
    scope_row = _scope(scope)
    now = timezone.now()
    txns = [
        {"txn": t, "id": transactions.transaction_uuid(t), "age": now - t.created_at,
         "lease_left": t.lease_expires_at - now}
        for t in grants.visible(request.user, sel.live_transactions(scope_row),
                                lambda t: grants.stream_prn(scope, t.stream.name))
    ]  # fmt: skip
    return render(
        request, "admin_ui/transactions.html", context(request, scope=scope_row, txns=txns)
    )


# -- audit ----------------------------------------------------------------------------------------


@page
def audit(request: HttpRequest) -> HttpResponse:
    filters = {
        k: request.GET.get(k, "").strip() for k in ("user", "object", "action", "since", "until")
    }
    rows = sel.audit_entries(
        user=filters["user"], obj=filters["object"], action=filters["action"],
        since=parse_when(filters["since"]), until=parse_when(filters["until"]),
    )  # fmt: skip
    if request.GET.get("format") == "csv":
        return _audit_csv(rows)
    return render(
        request,
        "admin_ui/audit.html",
        context(
            request,
            page=paginate(request, rows),
            filters=filters,
        ),
    )


class _Echo:
    def write(self, value: str) -> str:
        return value


def _audit_csv(rows: Any) -> StreamingHttpResponse:
    """Every matching row as CSV, streamed (the whole log if no filter is set)."""
    writer = csv.writer(_Echo())
    header = ["at", "user", "source", "address", "action", "object", "result", "detail"]

    def lines() -> Any:
        yield writer.writerow(header)
        entry: AuditEntry
        for entry in rows.iterator(chunk_size=2000):
            yield writer.writerow([entry.at.isoformat(), entry.username, entry.source,
                                   entry.address, entry.action, entry.object, entry.result,
                                   entry.detail])  # fmt: skip

    response = StreamingHttpResponse(lines(), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="millrace-audit.csv"'
    return response
