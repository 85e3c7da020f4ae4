"""Events decoded by the schema id in their header, for those who read them: REST reads and
WebSocket tails with ``decode=json``, the console's event browser, ``millrace stream read
--decode``.

Responsibility: ``EventDecoder`` turns an event written in Confluent's wire format into
``{"schemaId": n, "value": …}`` (the value as JSON: bytes in base64, decimals as strings, dates
and times in ISO 8601), or ``{"decodeError": why}``. It looks each schema up by id once
(``load``, a database read; callers on an event loop run it in a thread first), and keeps at most
``SCHEMAS_KEPT`` of them.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import uuid
from collections.abc import Iterable
from typing import Any

from controller_app.models import RegistrySchema
from controller_app.registry import formats, service
from controller_app.registry.errors import RegistryError
from millrace.kernel.schema_policy import HEADER_BYTES

__all__ = ["DECODINGS", "EventDecoder", "schema_id_of"]

#: The ``decode`` parameter's values ('' or absent: events as bytes).
DECODINGS = ("json",)
#: Schemas a decoder keeps parsed (by id).
SCHEMAS_KEPT = 256


def schema_id_of(data: bytes) -> int | None:
    """The schema id in an event's header, or None if it has none."""
    if len(data) < HEADER_BYTES or data[0] != 0:
        return None
    return int.from_bytes(data[1:HEADER_BYTES], "big")


def jsonable(value: Any) -> Any:
    """``value`` (a decoded event) as JSON takes it."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return value


class EventDecoder:
    """Decodes events by their schema ids (one decoder per request or subscription)."""

    def __init__(self) -> None:
        #: Schema id -> the parsed schema, or why it cannot be used.
        self._schemas: dict[int, formats.Parsed | str] = {}

    def load(self, datas: Iterable[bytes]) -> None:
        """Look up the schemas of these events that are not known yet (a database read)."""
        wanted = {i for i in map(schema_id_of, datas) if i is not None} - self._schemas.keys()
        if not wanted:
            return
        if len(self._schemas) + len(wanted) > SCHEMAS_KEPT:
            self._schemas.clear()
        rows = {row.pk: row for row in RegistrySchema.objects.filter(pk__in=wanted)}
        for schema_id in wanted:
            row = rows.get(schema_id)
            if row is None:
                self._schemas[schema_id] = f"schema id {schema_id} is not in the registry"
                continue
            try:
                self._schemas[schema_id] = service.parsed_schema(row)
            except RegistryError as exc:
                self._schemas[schema_id] = exc.message

    def decoded(self, data: bytes) -> dict[str, Any]:
        """``{"schemaId", "value"}``, or ``{"decodeError"}`` (with ``schemaId`` when it has
        one); ``load`` first, or it looks the schema up now."""
        schema_id = schema_id_of(data)
        if schema_id is None:
            return {"decodeError": "no schema header (0x00, then a 4-byte schema id)"}
        if schema_id not in self._schemas:
            self.load([data])
        schema = self._schemas[schema_id]
        if isinstance(schema, str):
            return {"schemaId": schema_id, "decodeError": schema}
        try:
            value = formats.decode(schema, data[HEADER_BYTES:])
        except formats.UndecodableError as exc:
            return {"schemaId": schema_id, "decodeError": str(exc)}
        return {"schemaId": schema_id, "value": jsonable(value)}
