"""The registry's operations, with Confluent's Schema Registry semantics (its REST API v1).

Responsibility: everything the REST views (``controller_app.api.registry``), the CLI and the
console ask of the registry, answered in Confluent's shapes (plain dicts and lists) or raised
as ``RegistryError`` with Confluent's codes. State is the metadata database only, so every
controller of a cluster serves the same registry.

What users trip on, kept as Confluent does it:

* re-registering a schema a subject has (live) answers its id, and makes no version;
* a soft delete hides versions (``?deleted=true`` shows them) but keeps ids resolvable; a
  permanent delete (``?permanent=true``) only follows a soft one (40405 / 40407 otherwise);
* versions keep counting after a soft delete; a schema id is never reused;
* a subject without a level of its own follows the global one (``BACKWARD`` unless set);
  ``GET /config/{subject}`` answers 40408 for it unless ``defaultToGlobal=true``;
* non-transitive levels check the latest live version only, transitive ones every live one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max, Q

from controller_app.models import RegistrySchema, RegistrySetting, SubjectVersion
from controller_app.registry import formats
from controller_app.registry.errors import RegistryError

__all__ = [
    "COMPATIBILITY_LEVELS",
    "DEFAULT_COMPATIBILITY",
    "MODES",
    "check_compatibility",
    "delete_config",
    "delete_mode",
    "delete_subject",
    "delete_version",
    "get_config",
    "get_mode",
    "get_version",
    "list_subjects",
    "list_versions",
    "lookup",
    "parsed_schema",
    "referenced_by",
    "register",
    "schema_by_id",
    "set_config",
    "set_mode",
    "subjects_of_schema",
    "versions_of_schema",
]

COMPATIBILITY_LEVELS = (
    "NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
    "FULL_TRANSITIVE",
)  # fmt: skip
DEFAULT_COMPATIBILITY = "BACKWARD"
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE")
DEFAULT_MODE = "READWRITE"
#: Deepest chain of references followed (a cycle is refused, not followed forever).
REFERENCE_DEPTH_MAX = 32
VERSION_MAX = 2**31 - 1


# -- reading ---------------------------------------------------------------------------------------


def _schema_fields(row: RegistrySchema, text: str | None = None) -> dict[str, Any]:
    """``schema``, and ``schemaType`` and ``references`` when they are not Avro's / empty."""
    answer: dict[str, Any] = {"schema": row.text if text is None else text}
    if row.schema_type != RegistrySchema.Type.AVRO:
        answer["schemaType"] = row.schema_type
    if row.references:
        answer["references"] = row.references
    return answer


def _text_as(row: RegistrySchema, fmt: str | None) -> str:
    """The schema in the format asked (``serialized``: a Protobuf schema as a base64
    descriptor, what Confluent's Protobuf deserializer asks for)."""
    if fmt == "serialized" and row.schema_type == RegistrySchema.Type.PROTOBUF:
        from controller_app.registry.protobuf_format import serialized

        return serialized(parsed_schema(row).model)
    return row.text


def schema_by_id(schema_id: int, fmt: str | None = None) -> dict[str, Any]:
    row = RegistrySchema.objects.filter(pk=schema_id).first()
    if row is None or not row.versions.exists():  # (every version of it deleted for good)
        raise RegistryError.schema_not_found(f"Schema {schema_id} not found")
    return _schema_fields(row, _text_as(row, fmt))


def subjects_of_schema(schema_id: int, *, deleted: bool = False) -> list[str]:
    return sorted({v["subject"] for v in versions_of_schema(schema_id, deleted=deleted)})


def versions_of_schema(schema_id: int, *, deleted: bool = False) -> list[dict[str, Any]]:
    rows = SubjectVersion.objects.filter(schema_id=schema_id)
    if not deleted:
        rows = rows.filter(deleted=False)
    found = [
        {"subject": r.subject, "version": r.version} for r in rows.order_by("subject", "version")
    ]
    if (
        not found
        and not RegistrySchema.objects.filter(pk=schema_id, versions__isnull=False).exists()
    ):
        raise RegistryError.schema_not_found(f"Schema {schema_id} not found")
    return found


def list_subjects(
    prefix: str = "", *, deleted: bool = False, deleted_only: bool = False
) -> list[str]:
    rows = SubjectVersion.objects.all()
    if prefix:
        rows = rows.filter(subject__startswith=prefix)
    live = set(rows.filter(deleted=False).values_list("subject", flat=True))
    if deleted_only:
        return sorted(set(rows.filter(deleted=True).values_list("subject", flat=True)) - live)
    if deleted:
        return sorted(set(rows.values_list("subject", flat=True)))
    return sorted(live)


def list_versions(subject: str, *, deleted: bool = False) -> list[int]:
    rows = SubjectVersion.objects.filter(subject=subject)
    if not deleted:
        rows = rows.filter(deleted=False)
    versions = list(rows.order_by("version").values_list("version", flat=True))
    if not versions:
        raise RegistryError.subject_not_found(subject)
    return versions


def version_number(version: str | int) -> int | None:
    """A version as the API takes it: a number in [1, 2^31-1], ``latest`` or ``-1`` (the latest:
    ``None``); ``RegistryError`` 42202 for anything else."""
    if version in ("latest", "-1", -1):
        return None
    try:
        number = int(version)
    except (TypeError, ValueError):
        raise RegistryError.invalid_version(version) from None
    if not 1 <= number <= VERSION_MAX:
        raise RegistryError.invalid_version(version)
    return number


def _version_row(subject: str, version: str | int, *, deleted: bool = False) -> SubjectVersion:
    number = version_number(version)
    rows = SubjectVersion.objects.filter(subject=subject).select_related("schema")
    if not rows.exists():
        raise RegistryError.subject_not_found(subject)
    if number is None:
        row = rows.filter(deleted=False).order_by("-version").first()
        if row is None and deleted:
            row = rows.order_by("-version").first()
    else:
        row = rows.filter(version=number).first()
        if row is not None and row.deleted and not deleted:
            row = None
    if row is None:
        if number is None and not deleted:
            raise RegistryError.subject_not_found(subject)
        raise RegistryError.version_not_found(subject, version)
    return row


def _version_answer(row: SubjectVersion, fmt: str | None = None) -> dict[str, Any]:
    answer = {"subject": row.subject, "version": row.version, "id": row.schema_id}
    answer.update(_schema_fields(row.schema, _text_as(row.schema, fmt)))
    return answer


def get_version(
    subject: str, version: str | int, *, deleted: bool = False, fmt: str | None = None
) -> dict[str, Any]:
    return _version_answer(_version_row(subject, version, deleted=deleted), fmt)


def referenced_by(subject: str, version: str | int) -> list[int]:
    row = _version_row(subject, version)
    return _referencing(row.subject, row.version)


def _referencing(subject: str, version: int) -> list[int]:
    """Ids of the schemas with a live version that refer to ``subject`` ``version``."""
    candidates = RegistrySchema.objects.filter(
        versions__deleted=False, references__icontains=subject
    ).distinct()
    return sorted(
        row.pk
        for row in candidates
        if any(r.get("subject") == subject and r.get("version") == version for r in row.references)
    )


# -- parsing, with references ----------------------------------------------------------------------


def _resolve(references: Iterable[dict[str, Any]], depth: int = 0) -> tuple[formats.Reference, ...]:
    if depth > REFERENCE_DEPTH_MAX:
        raise RegistryError.invalid_schema("references nest too deep (a cycle?)")
    resolved = []
    for ref in references:
        name, subject, version = ref.get("name"), ref.get("subject"), ref.get("version")
        if not isinstance(name, str) or not isinstance(subject, str) or not name:
            raise RegistryError.invalid_schema(f"a reference needs a name and a subject: {ref}")
        try:
            row = _version_row(subject, version if version is not None else "latest")
        except RegistryError:
            raise RegistryError.invalid_schema(
                f"reference {name!r} names {subject} version {version}, which does not exist"
            ) from None
        schema = row.schema
        inner = _resolve(schema.references, depth + 1)
        resolved.append(formats.Reference(name, schema.schema_type, schema.text, inner))
    return tuple(resolved)


def parsed_schema(row: RegistrySchema) -> formats.Parsed:
    try:
        return formats.parse(row.schema_type, row.text, _resolve(row.references))
    except formats.InvalidSchemaError as exc:  # (a reference deleted for good since)
        raise RegistryError.invalid_schema(
            f"stored schema {row.pk} no longer parses: {exc}"
        ) from None


def _parse(schema: dict[str, Any], *, normalize: bool) -> tuple[formats.Parsed, list[Any]]:
    text = schema.get("schema")
    schema_type = schema.get("schemaType") or "AVRO"
    references = schema.get("references") or []
    if not isinstance(text, str):
        raise RegistryError.invalid_schema("the request has no schema (a string)")
    if not isinstance(references, list):
        raise RegistryError.invalid_schema("references must be a list")
    try:
        return formats.parse(schema_type, text, _resolve(references), normalize=normalize), [
            {"name": r["name"], "subject": r["subject"], "version": r.get("version")}
            for r in references
        ]
    except formats.InvalidSchemaError as exc:
        raise RegistryError.invalid_schema(str(exc)) from None


# -- compatibility -----------------------------------------------------------------------------


def _problems(level: str, new: formats.Parsed, olds: list[formats.Parsed]) -> list[str]:
    """Why ``new`` breaks ``level`` against ``olds`` (oldest first; empty: it does not)."""
    if level == "NONE" or not olds:
        return []
    against = olds if level.endswith("_TRANSITIVE") else olds[-1:]
    problems: list[str] = []
    for old in against:
        if level.startswith(("BACKWARD", "FULL")):
            problems += formats.incompatibilities(new, old)
        if level.startswith(("FORWARD", "FULL")):
            problems += [f"(forward) {p}" for p in formats.incompatibilities(old, new)]
    return problems


def _live_rows(subject: str) -> list[SubjectVersion]:
    rows = SubjectVersion.objects.filter(subject=subject, deleted=False).select_related("schema")
    return list(rows.order_by("version"))


def check_compatibility(
    subject: str, version: str | int | None, schema: dict[str, Any], *, normalize: bool = False
) -> list[str]:
    """Why ``schema`` may not be registered next under ``subject``: against ``version`` only
    (in the level's direction), or (``None``) as registering it would check."""
    new, _ = _parse(schema, normalize=normalize)
    level = effective_compatibility(subject)
    if version is None:
        return _problems(level, new, [parsed_schema(r.schema) for r in _live_rows(subject)])
    row = _version_row(subject, version)
    return _problems(level.replace("_TRANSITIVE", ""), new, [parsed_schema(row.schema)])


# -- registering ---------------------------------------------------------------------------------


def lookup(
    subject: str, schema: dict[str, Any], *, normalize: bool = False, deleted: bool = False
) -> dict[str, Any]:
    """The version of ``subject`` that is ``schema`` (``POST /subjects/{subject}``)."""
    rows = SubjectVersion.objects.filter(subject=subject)
    if not rows.exists():
        raise RegistryError.subject_not_found(subject)
    parsed, _ = _parse(schema, normalize=normalize)
    if not deleted:
        rows = rows.filter(deleted=False)
    row = (
        rows.filter(schema__fingerprint=parsed.fingerprint)
        .select_related("schema")
        .order_by("-version")
        .first()
    )
    if row is None:
        raise RegistryError.schema_not_found()
    return _version_answer(row)


def register(subject: str, schema: dict[str, Any], *, normalize: bool = False) -> dict[str, Any]:
    """Register ``schema`` under ``subject``: its id (that of the live version that is it
    already, if one is)."""
    _check_writable(subject)
    parsed, references = _parse(schema, normalize=normalize)
    for _attempt in range(5):  # (another controller took the version number meanwhile)
        try:
            with transaction.atomic():
                return _register(subject, parsed, references)
        except IntegrityError:
            continue
    raise RegistryError(500, 50001, "could not register: the store was busy; try again")


def _register(subject: str, parsed: formats.Parsed, references: list[Any]) -> dict[str, Any]:
    live = _live_rows(subject)
    for row in live:
        if row.schema.fingerprint == parsed.fingerprint:
            return {"id": row.schema_id, "version": row.version}
    problems = _problems(
        effective_compatibility(subject), parsed, [parsed_schema(r.schema) for r in live]
    )
    if problems:
        raise RegistryError.incompatible(subject, problems)
    schema, _ = RegistrySchema.objects.get_or_create(
        fingerprint=parsed.fingerprint,
        defaults={"schema_type": parsed.schema_type, "text": parsed.text, "references": references},
    )
    last = SubjectVersion.objects.filter(subject=subject).aggregate(last=Max("version"))["last"]
    version = SubjectVersion.objects.create(subject=subject, version=(last or 0) + 1, schema=schema)
    return {"id": schema.pk, "version": version.version}


# -- deleting ---------------------------------------------------------------------------------


def delete_subject(subject: str, *, permanent: bool = False) -> list[int]:
    _check_writable(subject)
    rows = SubjectVersion.objects.filter(subject=subject)
    versions = list(rows.order_by("version").values_list("version", flat=True))
    if not versions:
        raise RegistryError.subject_not_found(subject)
    live = list(rows.filter(deleted=False).values_list("version", flat=True))
    for version in live:
        by = _referencing(subject, version)
        if by:
            raise RegistryError.referenced(subject, version, by)
    if permanent:
        if live:
            raise RegistryError.subject_not_soft_deleted(subject)
        with transaction.atomic():
            schemas = set(rows.values_list("schema_id", flat=True))
            rows.delete()
            _drop_orphans(schemas)
            RegistrySetting.objects.filter(subject=subject).delete()
        return versions
    if not live:
        raise RegistryError.subject_soft_deleted(subject)
    rows.filter(deleted=False).update(deleted=True)
    return sorted(live)


def delete_version(subject: str, version: str | int, *, permanent: bool = False) -> int:
    _check_writable(subject)
    number = version_number(version)
    row: SubjectVersion | None
    if number is None:
        row = _version_row(subject, "latest", deleted=permanent)
    else:
        row = SubjectVersion.objects.filter(subject=subject, version=number).first()
        if row is None:
            if not SubjectVersion.objects.filter(subject=subject).exists():
                raise RegistryError.subject_not_found(subject)
            raise RegistryError.version_not_found(subject, version)
    if not row.deleted:
        by = _referencing(subject, row.version)
        if by:
            raise RegistryError.referenced(subject, row.version, by)
    if permanent:
        if not row.deleted:
            raise RegistryError.version_not_soft_deleted(subject, row.version)
        with transaction.atomic():
            row.delete()
            _drop_orphans({row.schema_id})
        return row.version
    if row.deleted:
        raise RegistryError.version_soft_deleted(subject, row.version)
    row.deleted = True
    row.save(update_fields=["deleted"])
    return row.version


def _drop_orphans(schema_ids: set[int]) -> None:
    """Forget the schemas no version is any more (their ids are never reused)."""
    RegistrySchema.objects.filter(pk__in=schema_ids, versions__isnull=True).delete()


# -- configuration and mode ------------------------------------------------------------------------


def _setting(subject: str) -> RegistrySetting | None:
    return RegistrySetting.objects.filter(subject=subject).first()


def effective_compatibility(subject: str) -> str:
    """The level ``subject`` is held to: its own, else the global one, else ``BACKWARD``."""
    rows = {
        s.subject: s.compatibility
        for s in RegistrySetting.objects.filter(Q(subject=subject) | Q(subject=""))
    }
    return rows.get(subject) or rows.get("") or DEFAULT_COMPATIBILITY


def get_config(subject: str | None = None, *, default_to_global: bool = False) -> dict[str, str]:
    if subject is None:
        row = _setting("")
        return {"compatibilityLevel": (row.compatibility if row else None) or DEFAULT_COMPATIBILITY}
    row = _setting(subject)
    if row is None or row.compatibility is None:
        if default_to_global:
            return get_config()
        raise RegistryError.no_subject_compatibility(subject)
    return {"compatibilityLevel": row.compatibility}


def set_config(subject: str | None, level: object) -> dict[str, str]:
    if not isinstance(level, str) or level.upper() not in COMPATIBILITY_LEVELS:
        raise RegistryError.invalid_compatibility(level)
    RegistrySetting.objects.update_or_create(
        subject=subject or "", defaults={"compatibility": level.upper()}
    )
    return {"compatibility": level.upper()}


def delete_config(subject: str | None = None) -> dict[str, str]:
    """Drop the level of ``subject`` (or the global one, back to ``BACKWARD``); the level it
    had."""
    before = get_config(subject)
    RegistrySetting.objects.filter(subject=subject or "").update(compatibility=None)
    return before


def get_mode(subject: str | None = None, *, default_to_global: bool = False) -> dict[str, str]:
    row = _setting(subject or "")
    if row is None or row.mode is None:
        if subject is not None and not default_to_global:
            raise RegistryError.no_subject_mode(subject)
        if subject is not None:
            return get_mode()
        return {"mode": DEFAULT_MODE}
    return {"mode": row.mode}


def set_mode(subject: str | None, mode: object) -> dict[str, str]:
    if not isinstance(mode, str) or mode.upper() not in MODES:
        raise RegistryError.invalid_mode(mode)
    RegistrySetting.objects.update_or_create(subject=subject or "", defaults={"mode": mode.upper()})
    return {"mode": mode.upper()}


def delete_mode(subject: str | None = None) -> dict[str, str]:
    before = get_mode(subject)
    RegistrySetting.objects.filter(subject=subject or "").update(mode=None)
    return before


def _check_writable(subject: str) -> None:
    rows = {
        s.subject: s.mode
        for s in RegistrySetting.objects.filter(Q(subject=subject) | Q(subject=""))
    }
    mode = rows.get(subject) or rows.get("") or DEFAULT_MODE
    if mode != "READWRITE":
        raise RegistryError.read_only(subject)
