"""The console's key-value tables: a scope's tables (create, delete), and one table's
partitions with their sizes and its entries (browse by page, search by key prefix, add, edit
one at the version shown, remove with confirmation). Every change calls the workflow the REST
API calls and is audited under the REST API's name (``console.change``)."""

from __future__ import annotations

import base64
import binascii
import contextlib

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from admin_ui.console import change, context, done, page
from controller_app import audit
from controller_app import selectors as sel
from controller_app.access import grants
from controller_app.api.kvtables import describe, entry_json
from controller_app.errors import ControllerError, InvalidArgumentError
from controller_app.models import KeyValueTable
from controller_app.segment_client import segment_store
from controller_app.workflows import kvtables as kv
from controller_app.workflows.scopes import get_scope
from millrace.kernel.kvt import KvtConfig

#: Entries per page of the browser.
ENTRIES_PER_PAGE = 50


def _form_int(request: HttpRequest, field: str, default: int | None = None) -> int:
    text = request.POST.get(field, "").strip()
    if not text and default is not None:
        return default
    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(f"{field} must be a whole number, not {text!r}") from None


def _key_of(request: HttpRequest) -> bytes:
    """The key a form names: ``keyBase64`` (an entry's own form) or ``key`` typed as text."""
    if request.POST.get("keyBase64"):
        try:
            return base64.urlsafe_b64decode(request.POST["keyBase64"])
        except (binascii.Error, ValueError):
            raise InvalidArgumentError("the form's key is not base64") from None
    return request.POST.get("key", "").encode("utf-8")


@page
def kvtables(request: HttpRequest, scope: str) -> HttpResponse:
    try:
        scope_row = get_scope(scope)
        rows = grants.visible(request.user, kv.list_kvtables(scope),
                              lambda row: grants.kvtable_resource(scope, row.name))  # fmt: skip
        tables = [describe(row) for row in rows]
    except ControllerError:
        raise Http404(f"scope {scope} does not exist") from None
    return render(request, "admin_ui/kvtables.html",
                  context(request, scope=scope_row, tables=tables))  # fmt: skip


@page
def kvtable(request: HttpRequest, scope: str, kvtable: str) -> HttpResponse:
    try:
        row = kv.get_kvtable(scope, kvtable)
    except ControllerError:
        raise Http404(f"key-value table {scope}/{kvtable} does not exist") from None
    prefix = request.GET.get("prefix", "")
    token = request.GET.get("token", "")
    entries: list[dict[str, object]] = []
    next_token, error = "", ""
    partitions = _partitions(row) if row.state == "ACTIVE" else []
    if row.state == "ACTIVE":
        try:
            found, next_token = kv.list_entries(
                segment_store(), scope, kvtable, limit=ENTRIES_PER_PAGE, token=token,
                prefix=prefix.encode("utf-8"),
            )  # fmt: skip
            entries = [entry_json(e) for e in found]
        except ControllerError as exc:
            error = str(exc)
    return render(request, "admin_ui/kvtable.html", context(
        request, scope=row.scope, table=describe(row), entries=entries, prefix=prefix,
        token=token, next_token=next_token, error=error, partitions=partitions,
        key_length=row.primary_key_length + row.secondary_key_length,
    ))  # fmt: skip


def _partitions(row: KeyValueTable) -> list[dict[str, object]]:
    """Each partition's table segment, node, entry count and bytes (None where its node does
    not answer)."""
    store = segment_store()
    count = sel.container_count()
    shown = []
    for n, name in enumerate(row.segment_names()):
        item: dict[str, object] = {"partition": n, "name": name, "node": None,
                                   "entries": None, "bytes": None}  # fmt: skip
        with contextlib.suppress(ControllerError):
            uri = sel.node_uri(name, count)
            item["node"] = f"{uri.host}:{uri.port}"
            start, length, entries = store.table_counts(name)
            item.update(entries=entries, bytes=length - start)
        shown.append(item)
    return shown


@change("kvtable.create")
def kvtable_create(request: HttpRequest, scope: str) -> HttpResponse:
    name = request.POST.get("kvtName", "").strip()
    audit.name_object(request, scope, name)
    config = KvtConfig(
        _form_int(request, "partitionCount", 1), _form_int(request, "primaryKeyLength"),
        _form_int(request, "secondaryKeyLength", 0),
    )  # fmt: skip
    kv.create_kvtable(segment_store(), scope, name, config)
    return done(request, f"key-value table {scope}/{name} created",
                reverse("console:kvtable", args=[scope, name]))  # fmt: skip


@change("kvtable.delete")
def kvtable_delete(request: HttpRequest, scope: str, kvtable: str) -> HttpResponse:
    if request.POST.get("confirm", "").strip() != kvtable:
        raise InvalidArgumentError(f"type {kvtable!r} to confirm")
    kv.delete_kvtable(segment_store(), scope, kvtable)
    return done(request, f"key-value table {scope}/{kvtable} deleted",
                reverse("console:kvtables", args=[scope]))  # fmt: skip


@change("kvtable.put")
def entry_put(request: HttpRequest, scope: str, kvtable: str) -> HttpResponse:
    key = _key_of(request)
    value = request.POST.get("value", "").encode("utf-8")
    if request.POST.get("version"):
        version = _form_int(request, "version")
    elif request.POST.get("ifAbsent"):
        version = kv.NOT_EXISTS
    else:
        version = kv.NO_VERSION
    written = kv.put_entry(segment_store(), scope, kvtable, key, value, version)
    return done(request, f"{key.decode('utf-8', 'replace')} saved (version {written})")


@change("kvtable.remove")
def entry_remove(request: HttpRequest, scope: str, kvtable: str) -> HttpResponse:
    key = _key_of(request)
    if request.POST.get("confirm") != "yes":
        raise InvalidArgumentError("tick the box to confirm the removal")
    version = _form_int(request, "version") if request.POST.get("version") else kv.NO_VERSION
    kv.remove_entry(segment_store(), scope, kvtable, key, version)
    return done(request, f"{key.decode('utf-8', 'replace')} removed")
