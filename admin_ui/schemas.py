"""The console's schema registry: subjects (with their latest version and level, the global
level), one subject's versions (a version's schema, a diff between two, its level), a "test a
schema" form answering compatible or why not, and registering and deleting as the REST API
does (``controller_app.registry.service``, audited under the same names); a stream's binding to
its value subject (``controller_app.registry.policies``), set from the stream's page."""

from __future__ import annotations

import difflib
import json
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from admin_ui.console import change, context, done, page, reading_post
from controller_app import audit
from controller_app.access import grants
from controller_app.access.roles import may
from controller_app.registry import formats
from controller_app.registry import service as registry
from controller_app.registry.errors import RegistryError
from controller_app.workflows import streams
from controller_app.workflows.common import get_stream


def _pretty(answer: dict[str, Any]) -> str:
    """A schema's text for reading: JSON indented, Protobuf as it was given."""
    if answer.get("schemaType", "AVRO") == "PROTOBUF":
        return str(answer["schema"])
    return json.dumps(json.loads(answer["schema"]), indent=2)


def _body(request: HttpRequest) -> dict[str, Any]:
    schema_type = request.POST.get("schemaType", "AVRO")
    if schema_type not in formats.TYPES:
        raise RegistryError.invalid_schema(f"unknown schema type {schema_type!r}")
    return {"schema": request.POST.get("schema", ""), "schemaType": schema_type}


@page(resource=lambda request: grants.REGISTRY)
def subjects(request: HttpRequest) -> HttpResponse:
    prefix = request.GET.get("prefix", "")
    deleted = request.GET.get("deleted") == "1"
    rows = []
    for subject in registry.list_subjects(prefix, deleted=deleted):
        try:
            latest = registry.get_version(subject, "latest")
        except RegistryError:  # (soft-deleted: shown with ?deleted=1)
            latest = registry.get_version(subject, "latest", deleted=True) | {"deleted": True}
        latest["level"] = registry.effective_compatibility(subject)
        rows.append(latest)
    return render(request, "admin_ui/schemas.html", context(
        request, subjects=rows, prefix=prefix, deleted=deleted, types=formats.TYPES,
        levels=registry.COMPATIBILITY_LEVELS, level=registry.get_config()["compatibilityLevel"],
        may_admin=may(request.user, "admin"),
    ))  # fmt: skip


@page
def subject(request: HttpRequest, subject: str) -> HttpResponse:
    return _subject_page(request, subject)


def _subject_page(request: HttpRequest, subject: str, **extra: Any) -> HttpResponse:
    try:
        versions = registry.list_versions(subject, deleted=True)
    except RegistryError:
        raise Http404(f"subject {subject} does not exist") from None
    rows = {v: registry.get_version(subject, v, deleted=True) for v in versions}
    try:
        live = set(registry.list_versions(subject))
    except RegistryError:  # (every version soft-deleted)
        live = set()
    chosen = _version_of(request.GET.get("version"), versions, live)
    against = _version_of(request.GET.get("against"), versions, live, default=None)
    shown = rows[chosen]
    diff = ""
    if against is not None and against != chosen:
        diff = "\n".join(difflib.unified_diff(
            _pretty(rows[against]).splitlines(), _pretty(shown).splitlines(),
            f"version {against}", f"version {chosen}", lineterm="",
        ))  # fmt: skip
    own = registry.get_config(subject, default_to_global=True)["compatibilityLevel"]
    return render(request, "admin_ui/schema.html", context(
        request, subject=subject, versions=[
            {"version": v, "id": rows[v]["id"], "deleted": v not in live,
             "type": rows[v].get("schemaType", "AVRO")} for v in versions
        ],
        shown=shown, shown_text=_pretty(shown), chosen=chosen, against=against, diff=diff,
        level=own, levels=registry.COMPATIBILITY_LEVELS, types=formats.TYPES,
        may_admin=may(request.user, "admin"), **extra,
    ))  # fmt: skip


def _version_of(
    text: str | None, versions: list[int], live: set[int], default: int | None = -1
) -> Any:
    if text and text.isdigit() and int(text) in versions:
        return int(text)
    if default is None:
        return None
    return max(live) if live else versions[-1]


@reading_post
def schema_test(request: HttpRequest, subject: str) -> HttpResponse:
    """Whether the form's schema may be registered next under ``subject``, and why not."""
    tested = {"schema": request.POST.get("schema", ""), "type": request.POST.get("schemaType")}
    try:
        problems = registry.check_compatibility(subject, None, _body(request))
        verdict = {"compatible": not problems, "problems": problems}
    except RegistryError as exc:
        verdict = {"compatible": False, "problems": [f"{exc.code}: {exc.message}"]}
    return _subject_page(request, subject, verdict=verdict, tested=tested)


@change("schema.register",
        resource=lambda r: grants.subject_resource(r.POST.get("subject", "")))  # fmt: skip
def schema_register(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("subject", "").strip()
    if not name:
        raise RegistryError.invalid_schema("name the subject")
    made = registry.register(name, _body(request))
    audit.name_object(request, name, str(made["version"]))
    return done(request, f"{name}: version {made['version']} (schema id {made['id']})",
                reverse("console:schema", args=[name]))  # fmt: skip


@change("schema.delete-version", need="admin")
def schema_delete(request: HttpRequest, subject: str) -> HttpResponse:
    version = request.POST.get("version", "")
    permanent = request.POST.get("permanent") == "1"
    if request.POST.get("confirm") != "yes":
        raise RegistryError(422, 422, "tick the box to confirm")
    if version:
        gone = registry.delete_version(subject, version, permanent=permanent)
        text = f"{subject} version {gone} {'permanently ' if permanent else ''}deleted"
    else:
        gone_all = registry.delete_subject(subject, permanent=permanent)
        text = f"{subject} {'permanently ' if permanent else ''}deleted (versions {gone_all})"
    return done(request, text, reverse("console:schemas"))


@change("schema.config", need="admin")
def schema_config(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("subject", "") or None
    set_to = registry.set_config(name, request.POST.get("level", ""))
    audit.name_object(request, name or "(global)")
    return done(request, f"{name or 'global'} compatibility: {set_to['compatibility']}")


@change("stream.schema")
def stream_schema(request: HttpRequest, scope: str, stream: str) -> HttpResponse:
    """The stream page's form: its value subject ('' : the default) and enforcement."""
    row = get_stream(scope, stream)
    streams.bind_schema(row, subject=request.POST.get("subject", ""),
                  enforcement=request.POST.get("enforcement", ""))  # fmt: skip
    text = f"{scope}/{stream}: subject {row.subject}, enforcement {row.schema_enforcement}"
    return done(request, text, reverse("console:stream", args=[scope, stream]))
