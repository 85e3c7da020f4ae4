"""JSON Schema schemas: checked by ``jsonschema`` (draft 7 unless ``$schema`` names another),
and judged compatible by whether every document the writer's schema accepts, the reader's does.

The rules (Confluent's, for its open and closed content models), each reported with its path:

* a type narrowed (``integer`` widens to ``number``), an ``enum`` or ``const`` added or narrowed;
* a bound added or tightened (``maximum``, ``maxLength``, ``maxItems``, ``maxProperties`` and their
  ``min`` counterparts), a ``pattern`` added or changed;
* a required property added;
* a property added to an open content model (the writer's documents may have had anything
  there), one removed from a closed one (``additionalProperties: false``), a content model
  closed;
* ``items``, properties, ``additionalProperties`` and alternatives (``anyOf``/``oneOf``) compared
  in turn; any other keyword the reader adds or changes (``allOf``, ``not``, ``if``, ``format`` ...)
  is reported, not analysed.

References name other registered schemas; the reference's name is what ``$ref`` points to.
``decode`` reads an event's body as JSON and validates it against the schema.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema
from jsonschema.exceptions import SchemaError, best_match

from controller_app.registry.schema_types import (
    InvalidSchemaError,
    Reference,
    UndecodableError,
    compact_json,
)

__all__ = ["JsonModel", "decode", "incompatibilities", "parse"]

_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_COMPARED = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "anyOf", "oneOf", "pattern", "$ref", "$schema", "$id", "title", "description", "default",
    "examples", "$comment", "definitions", "$defs", *_UPPER, *_LOWER,
}  # fmt: skip


class JsonModel:
    """A parsed JSON Schema and the validator that checks documents against it (its
    references resolved)."""

    def __init__(self, schema: Any, validator: Any) -> None:
        self.schema = schema
        self.validator = validator


def _registry(references: tuple[Reference, ...]) -> referencing.Registry:
    registry: referencing.Registry = referencing.Registry()
    for ref in references:
        if ref.schema_type != "JSON":
            raise InvalidSchemaError(f"reference {ref.name!r} is {ref.schema_type}, not JSON")
        registry = registry.combine(_registry(ref.references))
        resource = referencing.Resource.from_contents(
            json.loads(ref.text), default_specification=referencing.jsonschema.DRAFT7
        )
        registry = registry.with_resource(ref.name, resource)
    return registry


def parse(text: str, references: tuple[Reference, ...], *, normalize: bool) -> tuple[Any, str, str]:
    stored = compact_json(text, sort_keys=normalize)
    schema = json.loads(stored)
    if not isinstance(schema, dict | bool):
        raise InvalidSchemaError("a JSON schema is an object or a boolean")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    try:
        cls.check_schema(schema)
        validator = cls(schema, registry=_registry(references))
    except (SchemaError, referencing.exceptions.Unresolvable) as exc:
        raise InvalidSchemaError(
            f"invalid JSON schema: {exc.message if hasattr(exc, 'message') else exc}"
        ) from None
    return JsonModel(schema, validator), stored, compact_json(stored, sort_keys=True)


def incompatibilities(reader: JsonModel, writer: JsonModel) -> list[str]:
    found: list[str] = []
    _compare(reader.schema, writer.schema, "#", found)
    return found


def _types(schema: dict[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if kind is None:
        return None
    return {kind} if isinstance(kind, str) else set(kind)


def _is_open(schema: dict[str, Any]) -> bool:
    return schema.get("additionalProperties", True) is not False


def _compare(reader: Any, writer: Any, path: str, found: list[str]) -> None:
    """Add to ``found`` why a document ``writer`` accepts may not be one ``reader`` accepts."""
    if writer is False or reader is True or reader == {} or reader == writer:
        return
    if reader is False:
        found.append(f"{path}: the schema accepts nothing now")
        return
    if writer is True:
        writer = {}
    if "$ref" in reader or "$ref" in writer:
        if reader.get("$ref") != writer.get("$ref"):
            found.append(f"{path}: the reference changed")
        return
    _compare_values(reader, writer, path, found)
    _compare_objects(reader, writer, path, found)
    if isinstance(reader.get("items"), dict | bool):
        _compare(reader["items"], writer.get("items", True), f"{path}/items", found)
    _compare_alternatives(reader, writer, path, found)
    for key in sorted(set(reader) - _COMPARED):
        if reader[key] != writer.get(key):
            found.append(f"{path}: {key} added or changed")


def _compare_values(
    reader: dict[str, Any], writer: dict[str, Any], path: str, found: list[str]
) -> None:
    wanted, given = _types(reader), _types(writer)
    if wanted is not None:
        if given is None:
            found.append(f"{path}: a type was added ({', '.join(sorted(wanted))})")
        else:
            lost = {
                t for t in given if t not in wanted and not (t == "integer" and "number" in wanted)
            }
            if lost:
                found.append(f"{path}: the type narrowed (no longer {', '.join(sorted(lost))})")
    allowed = _allowed(reader)
    if allowed is not None:
        had = _allowed(writer)
        if had is None:
            found.append(f"{path}: an enum was added")
        elif any(value not in allowed for value in had):
            found.append(f"{path}: the enum narrowed")
    for key in _UPPER:
        if key in reader and (key not in writer or reader[key] < writer[key]):
            found.append(f"{path}: {key} added or decreased")
    for key in _LOWER:
        if key in reader and (key not in writer or reader[key] > writer[key]):
            found.append(f"{path}: {key} added or increased")
    if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
        found.append(f"{path}: pattern added or changed")


def _allowed(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) else None


def _compare_objects(
    reader: dict[str, Any], writer: dict[str, Any], path: str, found: list[str]
) -> None:
    added = set(reader.get("required", ())) - set(writer.get("required", ()))
    for name in sorted(added):
        found.append(f"{path}: required property {name!r} added")
    mine, theirs = reader.get("properties", {}), writer.get("properties", {})
    for name in sorted(set(mine) & set(theirs)):
        _compare(mine[name], theirs[name], f"{path}/properties/{name}", found)
    for name in sorted(set(mine) - set(theirs)):
        if _is_open(writer):
            extra = writer.get("additionalProperties", True)
            before = len(found)
            _compare(mine[name], extra, f"{path}/properties/{name}", found)
            if len(found) > before:
                del found[before:]
                found.append(f"{path}: property {name!r} added to an open content model")
    extra = reader.get("additionalProperties", True)
    for name in sorted(set(theirs) - set(mine)):
        if extra is False:
            found.append(f"{path}: property {name!r} removed from a closed content model")
        else:
            _compare(extra, theirs[name], f"{path}/properties/{name}", found)
    if _is_open(writer) and extra is False:
        found.append(f"{path}: the content model was closed (additionalProperties: false)")
    elif isinstance(extra, dict) and _is_open(writer):
        _compare(
            extra, writer.get("additionalProperties", True), f"{path}/additionalProperties", found
        )


def _compare_alternatives(
    reader: dict[str, Any], writer: dict[str, Any], path: str, found: list[str]
) -> None:
    for key in ("anyOf", "oneOf"):
        options = reader.get(key)
        if options is None:
            continue
        given = writer.get(key) or writer.get("anyOf" if key == "oneOf" else "oneOf")
        for index, option in enumerate(given if given is not None else [writer]):
            if not any(not _issues(choice, option) for choice in options):
                found.append(f"{path}/{key}: alternative {index} has no compatible counterpart")


def _issues(reader: Any, writer: Any) -> list[str]:
    found: list[str] = []
    _compare(reader, writer, "#", found)
    return found


def decode(model: JsonModel, body: bytes) -> Any:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise UndecodableError(f"not JSON: {exc}") from None
    error = best_match(model.validator.iter_errors(value))
    if error is not None:
        where = error.json_path
        raise UndecodableError(f"does not match its JSON schema at {where}: {error.message}")
    return value
