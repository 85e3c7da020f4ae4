"""Schema formats: parse a schema (with its references), and judge what one can read of another.

Responsibility: one interface over the three formats the registry takes, each done by its
well-kept library (``avro_format``: Apache Avro's parser and its reader/writer compatibility
checker; ``json_format``: ``jsonschema``; ``protobuf_format``: ``protoc`` from grpcio-tools and
protobuf's descriptors). ``parse`` gives a ``Parsed`` (the text as stored, a fingerprint that
makes two registrations of the same schema one, the library's model) or raises
``InvalidSchemaError`` saying why; ``incompatibilities(reader, writer)`` lists why data written
with ``writer`` cannot be read with ``reader`` (empty: it can). Parsed schemas are cached by
fingerprint: a check against every version of a subject parses each once. ``decode(parsed,
body)`` reads an event's body (after its 5-byte header) as the value that schema wrote, or raises
``UndecodableError`` saying why.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Any

from controller_app.registry.schema_types import (
    InvalidSchemaError,
    Reference,
    UndecodableError,
    compact_json,
)

__all__ = [
    "TYPES",
    "InvalidSchemaError",
    "Parsed",
    "Reference",
    "UndecodableError",
    "compact_json",
    "decode",
    "incompatibilities",
    "parse",
]

#: The schema types, as Confluent names them (``GET /schemas/types``).
TYPES = ("AVRO", "JSON", "PROTOBUF")


@dataclasses.dataclass(frozen=True, eq=False)
class Parsed:
    schema_type: str
    #: The text as stored and answered.
    text: str
    fingerprint: str
    #: The library's model: an Avro ``Schema``, a JSON Schema document (with a validator of its
    #: references), a protobuf ``FileDescriptorSet``.
    model: Any


def _fingerprint(schema_type: str, normal: str, references: tuple[Reference, ...]) -> str:
    digest = hashlib.sha256(f"{schema_type}\n{normal}\n".encode())
    for ref in references:
        digest.update(f"{ref.name}\n{_fingerprint(ref.schema_type, ref.text, ref.references)}\n"
                      .encode())  # fmt: skip
    return digest.hexdigest()


def parse(
    schema_type: str, text: str, references: tuple[Reference, ...] = (), *, normalize: bool = False
) -> Parsed:
    """Parse ``text`` as a schema of ``schema_type`` (one of ``TYPES``); ``normalize``: store
    its normal form (keys sorted, spacing dropped) so that equivalent spellings are one."""
    if schema_type not in TYPES:
        raise InvalidSchemaError(f"unknown schema type {schema_type!r}: one of {', '.join(TYPES)}")
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchemaError("the schema is empty")
    return _parse_cached(schema_type, text, references, normalize)


@functools.lru_cache(maxsize=1024)
def _parse_cached(
    schema_type: str, text: str, references: tuple[Reference, ...], normalize: bool
) -> Parsed:
    model, stored, normal = _module(schema_type).parse(text, references, normalize=normalize)
    return Parsed(schema_type, stored, _fingerprint(schema_type, normal, references), model)


def incompatibilities(reader: Parsed, writer: Parsed) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    if reader.schema_type != writer.schema_type:
        return [f"the schema type changed from {writer.schema_type} to {reader.schema_type}"]
    found: list[str] = _module(reader.schema_type).incompatibilities(reader.model, writer.model)
    return found


def decode(parsed: Parsed, body: bytes) -> Any:
    """The value ``body`` (an event after its 5-byte header) holds, read with ``parsed``: Avro
    as Python values, JSON as the document (validated), Protobuf as the message's fields (its
    message indexes first, as Confluent writes them). ``UndecodableError`` says why not."""
    return _module(parsed.schema_type).decode(parsed.model, bytes(body))


@functools.cache
def _module(schema_type: str) -> Any:
    from controller_app.registry import avro_format, json_format, protobuf_format

    return {"AVRO": avro_format, "JSON": json_format, "PROTOBUF": protobuf_format}[schema_type]
