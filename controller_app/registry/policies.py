"""Streams bound to subjects: their schema binding set by the faces, and read by the segment
stores as policies.

Responsibility: ``binding`` and ``bind`` read and change a stream's value subject and
enforcement mode (REST, CLI, console and stream creation call them).
``DatabaseSchemaPolicies`` implements ``millrace.kernel.schema_policy``'s port for a node: a
stream's enforcement mode, its value subject, and the ids of the schemas registered under the
subject (versions not deleted), each with a check that decodes an event's body with it
(``validate`` only; the schema parsed once, cached by ``formats``). The node calls it in a
thread and caches what it gets (``segment_app.server.schema_guard``).
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import close_old_connections

from controller_app.models import RegistrySchema, Stream, SubjectVersion
from controller_app.registry import formats, service
from controller_app.registry.errors import RegistryError
from millrace.kernel.schema_policy import (
    ENFORCEMENT_NONE,
    ENFORCEMENT_VALIDATE,
    NO_POLICY,
    BodyCheck,
    SchemaPolicy,
)

__all__ = ["DatabaseSchemaPolicies", "binding", "body_check"]


def binding(row: Stream) -> dict[str, Any]:
    """The stream's schema binding as the API shows it."""
    return {
        "subject": row.subject,
        "defaultSubject": not row.value_subject,
        "enforcement": row.schema_enforcement,
    }


def _why_not(parsed: formats.Parsed, body: bytes) -> str | None:
    try:
        formats.decode(parsed, body)
    except formats.UndecodableError as exc:
        return str(exc)
    return None


def body_check(schema_row: RegistrySchema) -> BodyCheck:
    """Why an event's body does not decode with the schema of ``schema_row`` (None: it does);
    a stored schema that no longer parses refuses every body, saying so."""
    try:
        parsed = service.parsed_schema(schema_row)
    except RegistryError as exc:
        reason = str(exc)
        return lambda _body: reason
    return functools.partial(_why_not, parsed)


class DatabaseSchemaPolicies:
    """Streams' schema policies, from the metadata database (blocking; run in a thread)."""

    def policy(self, scope: str, stream: str) -> SchemaPolicy:
        close_old_connections()  # (a connection broken since the last call is made again)
        row = (
            Stream.objects.select_related("scope")
            .filter(scope__name=scope, name=stream)
            .only("name", "scope__name", "value_subject", "schema_enforcement")
            .first()
        )
        if row is None or row.schema_enforcement == ENFORCEMENT_NONE:
            return NO_POLICY
        subject = row.subject
        versions = SubjectVersion.objects.filter(subject=subject, deleted=False).select_related(
            "schema"
        )
        validate = row.schema_enforcement == ENFORCEMENT_VALIDATE
        schemas: dict[int, BodyCheck | None] = {
            v.schema_id: body_check(v.schema) if validate else None for v in versions
        }
        return SchemaPolicy(row.schema_enforcement, subject, schemas)
