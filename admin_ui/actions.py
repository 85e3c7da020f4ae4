"""The console's changes (POST): each validates what the form sent, calls the same workflow as
the REST API, and answers with a redirect to the page it came from (or the form again, with
the REST serializer's messages beside its fields). Roles and the audit log: ``console.change``.
"""

from __future__ import annotations

import itertools
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from admin_ui.console import change, context, done, parse_when
from controller_app import audit, quotas
from controller_app import selectors as sel
from controller_app.access import grants
from controller_app.api import serializers as s
from controller_app.errors import InvalidArgumentError
from controller_app.segment_client import segment_store
from controller_app.workflows import reader_groups as rg
from controller_app.workflows import scale, scopes, streams, transactions, truncate
from controller_app.workflows.common import get_stream
from controller_app.workflows.scopes import get_scope
from millrace.client.streamcut import StreamCut
from millrace.kernel import defaults
from millrace.kernel.quotas import QUOTA_LIMITS, limit_value

#: Parts one split makes, at most.
SPLIT_PARTS_MAX = 16


def _confirmed(request: HttpRequest, name: str) -> None:
    if request.POST.get("confirm", "").strip() != name:
        raise InvalidArgumentError(f"type {name!r} to confirm")


# -- scopes -------------------------------------------------------------------------------------


@change("scope.create", resource=lambda r: grants.scope_resource(r.POST.get("scopeName", "")))
def scope_create(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("scopeName", "").strip()
    audit.name_object(request, name)
    scopes.create_scope(name)
    return done(request, f"scope {name} created", reverse("console:streams", args=[name]))


@change("scope.delete")
def scope_delete(request: HttpRequest, scope: str) -> HttpResponse:
    _confirmed(request, scope)
    scopes.delete_scope(scope)
    return done(request, f"scope {scope} deleted", reverse("console:scopes"))


@change("scope.quota", need="admin")
def scope_quota(request: HttpRequest, scope: str) -> HttpResponse:
    """Set the scope's limits from the form (an empty field: none)."""
    limits: dict[str, Any] = {}
    for limit in QUOTA_LIMITS:
        try:
            text = request.POST.get(limit.field, "")
            limits[limit.name] = limit_value(limit.field, text, zero_is_none=True)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
    quotas.set_quota(scope, limits, request.POST.get("storedPolicy") or None)
    return done(request, f"the quota of {scope} is set")


# -- streams ------------------------------------------------------------------------------------


def nested(post: Any) -> dict[str, Any]:
    """The stream form's fields (``scalingPolicy.minSegments`` ...) as the REST API's JSON."""
    data: dict[str, Any] = {}
    for key, value in post.items():
        if key in ("csrfmiddlewaretoken", "next") or not value.strip():
            continue
        where = data
        *parents, leaf = key.split(".")
        for parent in parents:
            where = where.setdefault(parent, {})
        where[leaf] = value.strip()
    if "streamTags" in data:
        data["streamTags"] = [t.strip() for t in data["streamTags"].split(",") if t.strip()]
    retention = data.get("retentionPolicy")
    if retention is not None and not retention.get("type"):
        data["retentionPolicy"] = None  # "none" chosen: no retention
    return data


def flat_errors(detail: Any, prefix: str = "") -> dict[str, str]:
    """A serializer's nested errors keyed like the form's fields."""
    if isinstance(detail, dict):
        found: dict[str, str] = {}
        for key, value in detail.items():
            found.update(flat_errors(value, f"{prefix}{key}."))
        return found
    if isinstance(detail, list) and detail and not isinstance(detail[0], (dict, list)):
        return {prefix.rstrip(".") or "form": " ".join(str(x) for x in detail)}
    if isinstance(detail, list):
        found = {}
        for item in detail:
            found.update(flat_errors(item, prefix))
        return found
    return {prefix.rstrip(".") or "form": str(detail)}


def _form_again(
    request: HttpRequest, scope: str, errors: dict[str, str], editing: Any = None
) -> HttpResponse:
    response = render(
        request,
        "admin_ui/stream_form.html",
        context(
            request,
            scope=get_scope(scope),
            fieldsets=stream_fields(dict(request.POST.items()), errors, editing is None),
            form_error=errors.get("form") or errors.get("non_field_errors"),
            editing=editing,
        ),
        status=400,
    )
    response.audit_failure = "invalid-argument: " + "; ".join(  # type: ignore[attr-defined]
        f"{k}: {v}" for k, v in errors.items()
    )
    return response


def _stream_config(
    request: HttpRequest, scope: str, serializer_class: type, editing: Any = None
) -> tuple[Any, HttpResponse | None]:
    serializer = serializer_class(data=nested(request.POST))
    if not serializer.is_valid():
        return None, _form_again(request, scope, flat_errors(serializer.errors), editing)
    return serializer, None


@change("stream.create")
def stream_create(request: HttpRequest, scope: str) -> HttpResponse:
    get_scope(scope)
    serializer, failed = _stream_config(request, scope, s.StreamCreateSerializer)
    if failed is not None:
        return failed
    name = serializer.validated_data["streamName"]
    audit.name_object(request, scope, name)
    try:
        streams.create_stream(segment_store(), scope, name, serializer.to_config())
    except InvalidArgumentError as exc:
        return _form_again(request, scope, {"form": f"invalid-argument: {exc}"})
    return done(request, f"stream {scope}/{name} created", _detail_url(scope, name))


@change("stream.update")
def stream_update(request: HttpRequest, scope: str, stream: str) -> HttpResponse:
    row = get_stream(scope, stream)
    serializer, failed = _stream_config(request, scope, s.StreamUpdateSerializer, editing=row)
    if failed is not None:
        return failed
    try:
        streams.update_stream(
            scope, stream, serializer.to_config(), wait=defaults.WORKFLOW_WAIT_SECONDS
        )
    except InvalidArgumentError as exc:
        return _form_again(request, scope, {"form": f"invalid-argument: {exc}"}, editing=row)
    return done(request, f"stream {scope}/{stream} updated", _detail_url(scope, stream))


def _detail_url(scope: str, stream: str) -> str:
    return reverse("console:stream", args=[scope, stream])


@change("stream.seal")
def stream_seal(request: HttpRequest, scope: str, stream: str) -> HttpResponse:
    streams.seal_stream(scope, stream, wait=defaults.WORKFLOW_WAIT_SECONDS)
    return done(request, f"stream {scope}/{stream} sealed")


@change("stream.delete")
def stream_delete(request: HttpRequest, scope: str, stream: str) -> HttpResponse:
    _confirmed(request, stream)
    streams.delete_stream(scope, stream, wait=defaults.WORKFLOW_WAIT_SECONDS)
    return done(
        request, f"stream {scope}/{stream} deleted", reverse("console:streams", args=[scope])
    )


def _ids(request: HttpRequest) -> list[int]:
    try:
        return sorted({int(x) for x in request.POST.getlist("segment")})
    except ValueError:
        raise InvalidArgumentError("segment ids are integers") from None


def scale_plan(
    current: dict[int, tuple[float, float]], chosen: list[int], how: str, parts: int
) -> list[tuple[float, float]]:
    """The new key ranges of a split (each chosen segment into ``parts`` equal ranges) or of a
    merge (the chosen segments, which must be adjacent, into one)."""
    if not chosen:
        raise InvalidArgumentError("choose one or more segments on the key-space bar")
    unknown = [i for i in chosen if i not in current]
    if unknown:
        raise InvalidArgumentError(f"segments {unknown} are not current segments")
    if how == "split":
        if not 2 <= parts <= SPLIT_PARTS_MAX:
            raise InvalidArgumentError(f"a split makes 2 to {SPLIT_PARTS_MAX} parts")
        ranges = []
        for i in chosen:
            low, high = current[i]
            step = (high - low) / parts
            ranges += [(low + k * step, high if k == parts - 1 else low + (k + 1) * step)
                       for k in range(parts)]  # fmt: skip
        return ranges
    if how == "merge":
        if len(chosen) < 2:
            raise InvalidArgumentError("a merge needs two or more adjacent segments")
        spans = sorted(current[i] for i in chosen)
        if any(a[1] != b[0] for a, b in itertools.pairwise(spans)):
            raise InvalidArgumentError("only adjacent segments can be merged")
        return [(spans[0][0], spans[-1][1])]
    raise InvalidArgumentError("scale by split or merge")


@change("stream.scale")
def stream_scale(request: HttpRequest, scope: str, stream: str) -> HttpResponse:
    row = get_stream(scope, stream)
    current = {g.id: (g.key_start, g.key_end) for g in sel.current_segments(row)}
    chosen = _ids(request)
    parts_text = request.POST.get("parts", "2")
    parts = int(parts_text) if parts_text.isdigit() else 0
    ranges = scale_plan(current, chosen, request.POST.get("how", ""), parts)
    scale.scale_stream(scope, stream, chosen, ranges, wait=defaults.WORKFLOW_WAIT_SECONDS)
    row = get_stream(scope, stream)
    return done(request, f"stream {scope}/{stream} scaled: epoch {row.current_epoch}")


@change("stream.truncate")
def stream_truncate(request: HttpRequest, scope: str, stream: str) -> HttpResponse:
    row = get_stream(scope, stream)
    if request.POST.get("at") == "time":
        when = parse_when(request.POST.get("time", ""))
        if when is None:
            raise InvalidArgumentError("give the time as YYYY-MM-DD HH:MM[:SS] (UTC)")
        record = sel.cut_recorded_before(row, int(when.timestamp() * 1000))
        if record is None:
            raise InvalidArgumentError(
                "no stream cut was recorded at or before that time (the retention set is empty"
                " there): truncate at a stream cut instead"
            )
        cut = record.cut_ids()
    else:
        try:
            parsed = StreamCut.from_text(request.POST.get("cut", "").strip())
        except ValueError as exc:
            raise InvalidArgumentError(f"not a stream cut: {exc}") from None
        if (parsed.scope, parsed.stream) != (scope, stream):
            raise InvalidArgumentError(f"the stream cut is of {parsed.scope}/{parsed.stream}")
        cut = dict(parsed.positions)
    truncate.truncate_stream(
        segment_store(), scope, stream, cut, wait=defaults.WORKFLOW_WAIT_SECONDS
    )
    return done(request, f"stream {scope}/{stream} truncated")


# -- transactions ---------------------------------------------------------------------------------


@change("transaction.commit")
def txn_commit(request: HttpRequest, scope: str, stream: str, txn_id: str) -> HttpResponse:
    transactions.commit_transaction(
        scope, stream, transactions.parse_txn_id(txn_id), wait=defaults.WORKFLOW_WAIT_SECONDS
    )
    return done(request, f"transaction {txn_id} committed")


@change("transaction.commit")
def txn_commit_many(request: HttpRequest, scope: str, stream: str) -> HttpResponse:
    """The transactions ticked on the stream's page, committed at once: all or none."""
    ids = [transactions.parse_txn_id(text) for text in request.POST.getlist("txn")]
    if not ids:
        raise InvalidArgumentError("tick the transactions to commit")
    transactions.commit_transactions(scope, stream, ids, wait=defaults.WORKFLOW_WAIT_SECONDS)
    return done(request, f"{len(ids)} transactions of {scope}/{stream} committed")


@change("transaction.abort")
def txn_abort(request: HttpRequest, scope: str, stream: str, txn_id: str) -> HttpResponse:
    transactions.abort_transaction(
        scope, stream, transactions.parse_txn_id(txn_id), wait=defaults.WORKFLOW_WAIT_SECONDS
    )
    return done(request, f"transaction {txn_id} aborted")


# -- reader groups --------------------------------------------------------------------------------


@change("readergroup.checkpoint")
def rg_checkpoint(request: HttpRequest, scope: str, reader_group: str) -> HttpResponse:
    name = request.POST.get("checkpointName", "").strip()
    rg.start_checkpoint(scope, reader_group, name)
    return done(request, f"checkpoint {name} started: the readers report at their next sync")


@change("readergroup.reset")
def rg_reset(request: HttpRequest, scope: str, reader_group: str) -> HttpResponse:
    group = rg.get_reader_group(scope, reader_group)
    current = rg.ReaderGroupConfig.from_json(group.configuration)
    where = request.POST.get("to", "head")
    when = parse_when(request.POST.get("time", "")) if where == "time" else None
    if where == "time" and when is None:
        raise InvalidArgumentError("give the time as YYYY-MM-DD HH:MM[:SS] (UTC)")
    starts: dict[str, Any] = {}
    for scoped in current.streams:
        if where in ("head", "tail"):
            starts[scoped] = where
            continue
        if when is not None:  # each stream from the segments of its epoch current then
            scope_name, stream_name = scoped.split("/", 1)
            row = get_stream(scope_name, stream_name)
            ms = int(when.timestamp() * 1000)
            starts[scoped] = {g.id: o for g, o in sel.segments_at_time(row, ms).items()}
            continue
        try:
            parsed = StreamCut.from_text(request.POST.get("cut", "").strip())
        except ValueError as exc:
            raise InvalidArgumentError(f"not a stream cut: {exc}") from None
        if f"{parsed.scope}/{parsed.stream}" != scoped:
            raise InvalidArgumentError(
                f"the group reads {', '.join(current.streams)}: a cut of"
                f" {parsed.scope}/{parsed.stream} does not fit"
            )
        starts[scoped] = dict(parsed.positions)
    config = rg.ReaderGroupConfig(
        streams=starts, retention_type=current.retention_type,
        reader_timeout_ms=current.reader_timeout_ms,
        group_refresh_time_ms=current.group_refresh_time_ms,
    )  # fmt: skip
    rg.reset_reader_group(segment_store(), scope, reader_group, config)
    return done(request, f"reader group {scope}/{reader_group} reset to {where}")


# -- the stream form's fields ---------------------------------------------------------------------

SCALING_TYPES = [
    ("FIXED_NUM_SEGMENTS", "fixed number of segments"),
    ("BY_RATE_IN_EVENTS_PER_SEC", "by rate in events/s"),
    ("BY_RATE_IN_KBYTES_PER_SEC", "by rate in KiB/s"),
]
RETENTION_TYPES = [
    ("", "none: keep everything"),
    ("LIMITED_DAYS", "by time (days)"),
    ("LIMITED_SIZE_MB", "by size (MiB)"),
]
#: (fieldset, [(REST field path, label, input type, choices, default)]).
STREAM_FORM = [
    ("Scaling policy", [
        ("scalingPolicy.type", "Type", "select", SCALING_TYPES, "FIXED_NUM_SEGMENTS"),
        ("scalingPolicy.minSegments", "Minimum segments", "number", None, "1"),
        ("scalingPolicy.targetRate", "Target rate per segment (events/s or KiB/s)", "number",
         None, ""),
        ("scalingPolicy.scaleFactor", "Scale factor (parts per split)", "number", None, ""),
    ]),
    ("Retention policy", [
        ("retentionPolicy.type", "Type", "select", RETENTION_TYPES, ""),
        ("retentionPolicy.value", "Keep at least (days or MiB)", "number", None, ""),
        ("retentionPolicy.maxValue", "Keep at most (days or MiB; empty: no limit)", "number",
         None, ""),
    ]),
    ("Tags", [("streamTags", "Tags (comma separated)", "text", None, "")]),
]  # fmt: skip


def stream_fields(
    values: dict[str, str], errors: dict[str, str], creating: bool
) -> list[tuple[str, list[dict[str, Any]]]]:
    """The stream form as the template draws it: each field with its value and its error."""
    sets = [("Stream", [("streamName", "Name", "text", None, "")])] if creating else []
    return [
        (legend, [
            {"name": name, "id": "f-" + name.replace(".", "-"), "label": label, "type": kind,
             "choices": choices, "value": values.get(name, default), "error": errors.get(name)}
            for name, label, kind, choices, default in fields
        ])
        for legend, fields in sets + STREAM_FORM
    ]  # fmt: skip
