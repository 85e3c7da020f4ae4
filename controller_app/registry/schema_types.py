"""What the schema formats share: their errors, a schema's references, JSON made compact.

Responsibility: the types each format module (``avro_format``, ``json_format``,
``protobuf_format``) and the dispatcher over them (``formats``) both use, so that the formats
need not import the dispatcher that imports them.
"""

from __future__ import annotations

import dataclasses
import json

__all__ = ["InvalidSchemaError", "Reference", "UndecodableError", "compact_json"]


class InvalidSchemaError(ValueError):
    """The schema does not parse (Confluent's 42201), with the library's reason."""


class UndecodableError(ValueError):
    """An event's body does not decode with its schema, with the library's reason."""


@dataclasses.dataclass(frozen=True)
class Reference:
    """A schema a schema refers to: the name it is imported or referred by, and its text and
    own references (resolved)."""

    name: str
    schema_type: str
    text: str
    references: tuple[Reference, ...] = ()


def compact_json(text: str, *, sort_keys: bool = False) -> str:
    """``text`` as compact JSON (``InvalidSchemaError`` if it is not JSON)."""
    try:
        return json.dumps(json.loads(text), separators=(",", ":"), sort_keys=sort_keys)
    except (ValueError, RecursionError) as exc:
        raise InvalidSchemaError(f"the schema is not JSON: {exc}") from None
