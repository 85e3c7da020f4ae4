"""Avro schemas, by Apache Avro's own parser and its reader/writer compatibility checker.

Referenced schemas (Confluent's references: named types defined in another subject) are parsed
first into the same names, so the schema can use their full names. The text is stored as
compact JSON (as given, or with keys sorted when normalizing). ``decode`` reads a value with
``fastavro`` (compiled; the schema given to it once per parsed schema), and refuses bytes left
over after it.
"""

from __future__ import annotations

import io
import json
from typing import Any

import avro.errors
import avro.name
import avro.schema
import fastavro
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from controller_app.registry.schema_types import (
    InvalidSchemaError,
    Reference,
    UndecodableError,
    compact_json,
)

__all__ = ["decode", "incompatibilities", "parse"]


def _define(references: tuple[Reference, ...], names: avro.name.Names) -> None:
    for ref in references:
        if ref.schema_type != "AVRO":
            raise InvalidSchemaError(f"reference {ref.name!r} is {ref.schema_type}, not AVRO")
        _define(ref.references, names)
        if names.has_name(ref.name, None):
            continue
        avro.schema.make_avsc_object(json.loads(ref.text), names)


def parse(
    text: str, references: tuple[Reference, ...], *, normalize: bool
) -> tuple[avro.schema.Schema, str, str]:
    stored = compact_json(text, sort_keys=normalize)
    names = avro.name.Names()
    try:
        _define(references, names)
        schema = avro.schema.make_avsc_object(json.loads(stored), names)
    except (avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidSchemaError(f"invalid Avro schema: {exc}") from None
    return schema, stored, stored


def incompatibilities(reader: Any, writer: Any) -> list[str]:
    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
    result = checker.get_compatibility(reader, writer)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = sorted(kind.value for kind in result.incompatibilities)
    where = ", ".join(sorted(result.locations)) or "/"
    what = ", ".join(sorted(str(m) for m in result.messages))
    return [f"{', '.join(kinds)} at {where}" + (f" ({what})" if what else "")]


#: fastavro's form of a parsed schema (its JSON: named types from references inlined), kept
#: on the schema object (Avro's schemas hash by their JSON, too slow a key per event).
_FAST = "_millrace_fastavro"


def decode(schema: avro.schema.Schema, body: bytes) -> Any:
    fast = getattr(schema, _FAST, None)
    if fast is None:
        fast = fastavro.parse_schema(schema.to_json())  # type: ignore[arg-type]
        setattr(schema, _FAST, fast)
    stream = io.BytesIO(body)
    try:
        value = fastavro.schemaless_reader(stream, fast, None)
    except EOFError:
        raise UndecodableError("not Avro of its schema: the value is cut short") from None
    except Exception as exc:  # (Avro's reader raises whatever bad bytes lead it to)
        raise UndecodableError(f"not Avro of its schema: {type(exc).__name__}: {exc}") from None
    if stream.tell() != len(body):
        raise UndecodableError(
            f"not Avro of its schema: {len(body) - stream.tell()} bytes left over after the value"
        )
    return value
