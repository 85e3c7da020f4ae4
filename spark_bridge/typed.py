"""Typed rows: option ``schema=registry`` (executors and driver).

The driver resolves the stream's value subject to one Avro schema (``Binding``: the latest
version, or ``schema_version``; a write with ``auto_register_schemas`` registers the
DataFrame's own), which every task gets with the options.

* **Read** (``Decoder``): each event is in Confluent's wire format (``0x00``, a 4-byte
  big-endian schema id, the Avro datum). The events of a batch are grouped by schema id; those
  written with the reader's own schema are decoded a whole batch at once by Polars' Avro
  reader (the datums, stripped of their headers with numpy, become one block of an Avro
  container file in memory), the others one by one by fastavro with their writer's schema
  resolved to the reader's (Avro's rules: new fields take their defaults, removed ones are
  dropped, numbers widen). Parsed schemas are kept per process (by id: an id's schema never
  changes), so a schema is fetched and parsed once per worker, not per event or batch.
* **Write** (``Encoder``): each row encoded by fastavro and framed with the header.

An event that is not in the wire format, names a schema id the registry does not have or does
not decode fails the read naming its segment and offset (``mode=FAILFAST``, the default), or
gives a row whose ``value`` and ``schema_id`` are null (``mode=PERMISSIVE``), as Spark's
``from_avro`` modes.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import functools
import io
import json
import logging
from collections.abc import Callable
from typing import Any

import fastavro
import fastavro.schema
import numpy as np
import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from millrace.client.controller import ControllerError
from millrace.client.events import EventFormatError
from spark_bridge import avro_arrow, avro_types
from spark_bridge.options import OptionError, Options

__all__ = ["HEADER_BYTES", "Binding", "Decoder", "Encoder", "decoder_of", "resolve"]

log = logging.getLogger(__name__)

#: Confluent's wire format: a zero byte and the schema id (4 bytes, big-endian).
HEADER_BYTES = 5
MAGIC = 0
#: The registry's error code for a subject or version it does not have (Confluent's).
NOT_FOUND_CODES = ("40401", "40402")


@dataclasses.dataclass(frozen=True)
class Binding:
    """The schema a typed job reads or writes with (resolved once, on the driver)."""

    subject: str
    version: int
    schema_id: int
    #: the schema's text (Avro JSON)
    schema: str

    @functools.cached_property
    def parsed(self) -> Any:
        return json.loads(self.schema)

    @functools.cached_property
    def value_type(self) -> T.DataType:
        return avro_types.spark_type(self.parsed)


def resolve(manager: Any, options: Options, writing: T.StructType | None = None) -> Binding:
    """The stream's value subject's schema: the version ``schema_version`` (0: the latest);
    for a write with ``auto_register_schemas``, the DataFrame's own schema, registered (or
    found, when registered already) under the subject."""
    try:
        subject = manager.stream_schema(options.scope, options.stream)["subject"]
    except ControllerError as exc:
        if exc.status == 404:
            subject = f"{options.scope}.{options.stream}-value"  # (the default; made on write)
        else:
            raise
    if writing is not None and options.auto_register_schemas:
        avro = avro_types.avro_of(_record_columns(writing))
        try:
            body = {"schema": json.dumps(avro)}
            found = manager.admin(lambda a: a.register_schema(subject, body))
        except ControllerError as exc:
            raise OptionError(
                f"millrace: the DataFrame's schema cannot be registered under {subject!r}:"
                f" {exc.message}"
            ) from None
        return Binding(subject, 0, int(found["id"]), json.dumps(avro))
    version = str(options.schema_version or "latest")
    try:
        found = manager.admin(lambda a: a.schema_version(subject, version))
    except ControllerError as exc:
        if exc.code in NOT_FOUND_CODES:
            raise OptionError(
                f"millrace: option 'schema': subject {subject!r} (the value subject of"
                f" {options.scope}/{options.stream}) has no version {version}"
                + (
                    " (register one, or write with auto_register_schemas=true)"
                    if writing is not None
                    else ""
                )
            ) from None
        raise
    kind = found.get("schemaType", "AVRO")
    if kind != "AVRO":
        raise OptionError(
            f"millrace: option 'schema': subject {subject!r} holds {kind} schemas; typed Spark"
            " reads and writes Avro"
        )
    binding = Binding(subject, int(found["version"]), int(found["id"]), found["schema"])
    try:
        binding.value_type  # noqa: B018 (checked on the driver, not in every task)
    except avro_types.SchemaTypeError as exc:
        raise OptionError(f"millrace: subject {subject!r}: {exc}") from None
    return binding


def _record_columns(schema: T.StructType) -> T.StructType:
    """The columns a typed write encodes: a struct column ``value`` alone, or else every
    column but ``routing_key``."""
    fields = [f for f in schema.fields if f.name != "routing_key"]
    if (
        len(fields) == 1
        and fields[0].name == "value"
        and isinstance(fields[0].dataType, T.StructType)
    ):
        return fields[0].dataType
    return T.StructType(fields)


def arrow_type(kind: T.DataType) -> pa.DataType:
    return to_arrow_type(kind, timezone="UTC")


# -- read -----------------------------------------------------------------------------------------


class Decoder:
    """Decodes events into the binding's Spark type, as Arrow arrays (one per worker and
    binding: ``decoder_of``)."""

    def __init__(self, binding: Binding, fetch: Callable[[int], dict[str, Any]]) -> None:
        self.binding = binding
        self.fetch = fetch
        self.target = arrow_type(binding.value_type)
        self.reader = self._parse(binding.parsed)
        self.expanded = fastavro.schema.expand_schema(avro_types.without_time(binding.parsed))
        self._writers: dict[int, Any] = {binding.schema_id: self.reader}
        self.columnar = avro_types.polars_reads(binding.parsed)
        self._container_head = b""
        if self.columnar:
            head = io.BytesIO()
            fastavro.writer(head, self.reader, [])
            self._container_head = head.getvalue()

    @staticmethod
    def _parse(schema: Any) -> Any:
        return fastavro.parse_schema(avro_types.without_time(schema))

    def writer(self, schema_id: int) -> Any:
        parsed = self._writers.get(schema_id)
        if parsed is None:
            try:
                found = self.fetch(schema_id)
            except ControllerError as exc:
                raise EventFormatError(f"schema id {schema_id}: {exc.message}") from None
            if found.get("schemaType", "AVRO") != "AVRO":
                raise EventFormatError(
                    f"schema id {schema_id} is a {found['schemaType']} schema, not Avro"
                )
            parsed = self._writers[schema_id] = self._parse(json.loads(found["schema"]))
        return parsed

    def decode(
        self, events: pa.Array, where: Callable[[int], str], permissive: bool
    ) -> tuple[pa.Array, pa.Array]:
        """The ``value`` and ``schema_id`` columns of a batch's ``event`` column; ``where(i)``
        names row ``i`` in an error."""
        count = len(events)
        offsets = np.frombuffer(events.buffers()[1], np.int32, count + 1, events.offset * 4)
        data = np.frombuffer(events.buffers()[2], np.uint8) if count else np.empty(0, np.uint8)
        starts, ends = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
        framed = ends - starts >= HEADER_BYTES
        head = np.where(framed, starts, 0)
        framed &= data[head] == MAGIC if len(data) else framed
        ids = np.zeros(count, np.int64)
        for i in range(1, HEADER_BYTES):
            ids = (ids << 8) | data[np.minimum(head + i, max(len(data) - 1, 0))]
        if not framed.all():
            bad = int(np.argmin(framed))
            if not permissive:
                raise EventFormatError(
                    f"{where(bad)}: the event is not in Confluent's wire format (a zero byte"
                    " and a 4-byte schema id)"
                )
        parts, rows = [], []
        for schema_id in np.unique(ids[framed]):
            chosen = np.flatnonzero(framed & (ids == schema_id))
            values = self._group(int(schema_id), data, starts[chosen], ends[chosen], chosen,
                                 where, permissive)  # fmt: skip
            parts.append(values)
            rows.append(chosen)
        unframed = np.flatnonzero(~framed)
        if len(unframed):
            parts.append(pa.nulls(len(unframed), self.target))
            rows.append(unframed)
        schema_ids = pa.array(np.where(framed, ids, 0).astype(np.int32), mask=~framed)
        if len(parts) == 1:
            return parts[0], schema_ids
        order = np.argsort(np.concatenate(rows), kind="stable")
        values = pa.concat_arrays(parts) if parts else pa.nulls(0, self.target)
        return values.take(pa.array(order)), schema_ids

    def _group(
        self, schema_id: int, data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
        rows: np.ndarray, where: Callable[[int], str], permissive: bool,
    ) -> pa.Array:  # fmt: skip
        """The values of the events written with one schema id."""
        try:
            writer = self.writer(schema_id)
        except EventFormatError as exc:
            if permissive:
                return pa.nulls(len(rows), self.target)
            raise EventFormatError(f"{where(int(rows[0]))}: {exc}") from None
        lengths = ends - starts - HEADER_BYTES
        if schema_id == self.binding.schema_id and self.columnar:
            body = data[avro_arrow.gather(starts + HEADER_BYTES, lengths)].tobytes()
            try:
                return self._columnar(body, len(rows))
            except Exception as exc:  # (one by one then, to name the event)
                log.debug("typed read: %d events decoded one by one: %s", len(rows), exc)
        values = []
        for row, start, end in zip(rows, starts, ends, strict=True):
            datum = io.BytesIO(data[start + HEADER_BYTES : end].tobytes())
            try:
                value = fastavro.schemaless_reader(datum, writer, self.reader)
            except Exception as exc:  # (any decoding failure: the datum's fault)
                if not permissive:
                    raise EventFormatError(
                        f"{where(int(row))}: the event does not decode with schema id"
                        f" {schema_id}: {type(exc).__name__}: {exc}"
                    ) from None
                value = None
            values.append(_spark_value(value, self.expanded))
        return pa.array(values, self.target)

    def _columnar(self, body: bytes, count: int) -> pa.Array:
        import polars

        head = self._container_head
        block = head + _long(count) + _long(len(body)) + body + head[-16:]
        table = polars.read_avro(io.BytesIO(block)).to_arrow()
        if table.num_rows != count:
            raise EventFormatError(f"{table.num_rows} values decoded from {count} events")
        fields = [pa.field(name, column.type) for name, column in
                  zip(table.column_names, table.columns, strict=True)]  # fmt: skip
        arrays = [column.combine_chunks() for column in table.columns]
        return pa.StructArray.from_arrays(arrays, fields=fields).cast(self.target)


def _long(value: int) -> bytes:
    """An Avro long (zigzag, then base-128 varint), for a container block's counts."""
    number = (value << 1) ^ (value >> 63)
    out = bytearray()
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _spark_value(value: Any, node: Any) -> Any:
    """A value fastavro decoded with the (expanded) reader schema ``node``, as Arrow takes it
    for its Spark type: a multi-type union's value as the struct of members Spark makes of it
    (the first member it fits set), a map as key-value pairs, and a logical type's default
    (which fastavro hands over as written in the schema) converted as its values are."""
    if value is None:
        return None
    if isinstance(node, list):
        rest = [branch for branch in node if branch != "null"]
        if len(rest) == 1 or {str(b) for b in rest} in ({"int", "long"}, {"float", "double"}):
            return _spark_value(value, rest[0]) if len(rest) == 1 else value
        for number, branch in enumerate(rest):
            if isinstance(value, _python_types(branch)) and (
                not isinstance(value, bool) or _kind(branch) == "boolean"
            ):
                return {f"member{number}": _spark_value(value, branch)}
        return {"member0": value}
    if not isinstance(node, dict):
        return value
    kind, logical = node["type"], node.get("logicalType")
    if isinstance(kind, (dict, list)):
        return _spark_value(value, kind)
    if logical in _DEFAULTS and isinstance(value, (int, str)) and not isinstance(value, bool):
        return _DEFAULTS[logical](value, node)
    if kind == "record":
        return {f["name"]: _spark_value(value.get(f["name"]), f["type"]) for f in node["fields"]}
    if kind == "array":
        return [_spark_value(item, node["items"]) for item in value]
    if kind == "map":
        return [(key, _spark_value(item, node["values"])) for key, item in value.items()]
    return value


def _kind(node: Any) -> str:
    return str(node["type"] if isinstance(node, dict) else node)


def _python_types(node: Any) -> tuple[type, ...]:
    return {
        "string": (str,), "enum": (str,), "int": (int,), "long": (int,), "boolean": (bool,),
        "float": (float,), "double": (float,), "bytes": (bytes,), "fixed": (bytes,),
        "record": (dict,), "map": (dict,), "array": (list,),
    }.get(_kind(node), ())  # fmt: skip


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: A logical type's default value (as the schema writes it) as its decoded values are.
_DEFAULTS: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "decimal": lambda v, node: decimal.Decimal(
        int.from_bytes(str(v).encode("latin-1"), "big", signed=True)
    ).scaleb(-int(node.get("scale", 0))),
    "date": lambda v, node: datetime.date(1970, 1, 1) + datetime.timedelta(days=int(v)),
    "timestamp-millis": lambda v, node: _EPOCH + datetime.timedelta(milliseconds=int(v)),
    "timestamp-micros": lambda v, node: _EPOCH + datetime.timedelta(microseconds=int(v)),
    "local-timestamp-millis": lambda v, node: (
        datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=int(v))
    ),
    "local-timestamp-micros": lambda v, node: (
        datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=int(v))
    ),
}


@functools.lru_cache(maxsize=32)
def decoder_of(binding: Binding, controller: str, token: str, trust_store: str) -> Decoder:
    """This worker's decoder of a binding (its parsed schemas kept from task to task)."""
    from spark_bridge.worker_state import manager_of

    options = Options(controller=controller, scope="-", token=token, trust_store=trust_store)

    def fetch(schema_id: int) -> dict[str, Any]:
        with manager_of(options) as manager:
            return manager.admin(lambda a: a.schema_by_id(schema_id))  # type: ignore[no-any-return]

    return Decoder(binding, fetch)


# -- write ----------------------------------------------------------------------------------------


class Encoder:
    """Encodes a DataFrame's rows with the binding's schema into Confluent's wire format."""

    def __init__(self, binding: Binding) -> None:
        self.binding = binding
        self.schema = fastavro.parse_schema(avro_types.without_time(binding.parsed))
        self.header = bytes([MAGIC]) + binding.schema_id.to_bytes(4, "big")
        #: a flat record's fields, encoded a column at a time (``avro_arrow``), or None
        self.flat = avro_arrow.plan(self.schema)

    def events(self, batch: Any) -> Any:
        """A record batch of Spark's rows as one with the ``event`` column (and the
        ``routing_key`` column, when it has one)."""
        names = batch.schema.names
        columns = [n for n in names if n != "routing_key"]
        if columns == ["value"] and pa.types.is_struct(batch.schema.field("value").type):
            record = batch.column(names.index("value"))
            fields = [record.type.field(i).name for i in range(record.type.num_fields)]
            arrays = record.flatten()
        else:
            fields, arrays = columns, [batch.column(names.index(n)) for n in columns]
        events = None
        if self.flat is not None:
            given = dict(zip(fields, arrays, strict=True))
            events = avro_arrow.encode(self.flat, given, self.header, batch.num_rows)
        if events is None:
            events = self._one_by_one(self._rows(fields, arrays))
        out_arrays, columns_out = [events], ["event"]
        if "routing_key" in names:
            out_arrays.append(batch.column(names.index("routing_key")))
            columns_out.append("routing_key")
        return pa.RecordBatch.from_arrays(out_arrays, names=columns_out)

    def _one_by_one(self, rows: list[dict[str, Any]]) -> pa.Array:
        """The rows encoded by fastavro, one by one."""
        out = []
        buffer = io.BytesIO()
        for number, row in enumerate(rows):
            buffer.seek(0)
            buffer.truncate()
            buffer.write(self.header)
            try:
                fastavro.schemaless_writer(buffer, self.schema, row)
            except Exception as exc:  # (a row that does not fit: the row's fault)
                raise ValueError(
                    f"millrace: row {number} of a batch does not fit the schema of"
                    f" {self.binding.subject!r} (id {self.binding.schema_id}):"
                    f" {type(exc).__name__}: {exc}"
                ) from None
            out.append(buffer.getvalue())
        return pa.array(out, pa.binary())

    def _rows(self, names: list[str], columns: list[Any]) -> list[dict[str, Any]]:
        """The rows as dicts, made a column at a time: a date or a microsecond timestamp that
        the schema's field takes as one is handed over as its number (days, microseconds:
        what fastavro would turn the Python object into), the rest as Python values."""
        logical = self._logical_fields()
        values = []
        for name, column in zip(names, columns, strict=True):
            kind = column.type
            if logical.get(name) == "date" and pa.types.is_date32(kind):
                values.append(column.cast(pa.int32()).to_pylist())
            elif logical.get(name, "").endswith("timestamp-micros") and pa.types.is_timestamp(kind):
                values.append(column.cast(pa.timestamp("us", kind.tz)).cast(pa.int64()).to_pylist())
            elif _has_map(kind):
                values.append([_avro_value(v) for v in column.to_pylist()])
            else:
                values.append(column.to_pylist())
        rows = [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]
        defaulted = self._defaulted_fields() & set(names)
        if defaulted:  # a null where the field takes none but has a default: the default
            for row in rows:
                for name in defaulted:
                    if row[name] is None:
                        del row[name]
        return rows

    @functools.cache  # noqa: B019 (one Encoder per task; the schema's fields never change)
    def _defaulted_fields(self) -> set[str]:
        """The schema's top-level fields that take no null but have a default."""
        fields = self.schema.get("fields", ()) if isinstance(self.schema, dict) else ()
        return {
            f["name"] for f in fields
            if "default" in f and not (isinstance(f["type"], list) and "null" in f["type"])
        }  # fmt: skip

    @functools.cache  # noqa: B019 (one Encoder per task; the schema's fields never change)
    def _logical_fields(self) -> dict[str, str]:
        """The schema's top-level fields with a logical type (of their non-null branch)."""
        found = {}
        for field in self.schema.get("fields", ()) if isinstance(self.schema, dict) else ():
            kind = field["type"]
            if isinstance(kind, list):
                rest = [b for b in kind if b != "null"]
                kind = rest[0] if len(rest) == 1 else None
            if isinstance(kind, dict) and "logicalType" in kind:
                found[field["name"]] = str(kind["logicalType"])
        return found


def _has_map(kind: pa.DataType) -> bool:
    if pa.types.is_map(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_has_map(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _has_map(kind.value_type)
    return False


def _avro_value(value: Any) -> Any:
    """A row as Arrow gave it, as fastavro takes it: maps (key-value pairs) as dicts."""
    if isinstance(value, dict):
        return {k: _avro_value(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: _avro_value(v) for k, v in value}
        return [_avro_value(v) for v in value]
    return value


# -- rows -----------------------------------------------------------------------------------------

#: The columns of a typed read, in order.
COLUMNS = ("value", "schema_id", "scope", "stream", "segment_id", "offset")


def read_schema(binding: Binding) -> T.StructType:
    """A typed read's rows: the decoded ``value``, the ``schema_id`` it was written with and
    where the event is."""
    return T.StructType([
        T.StructField("value", binding.value_type, True),
        T.StructField("schema_id", T.IntegerType(), True),
        T.StructField("scope", T.StringType(), True),
        T.StructField("stream", T.StringType(), True),
        T.StructField("segment_id", T.LongType(), True),
        T.StructField("offset", T.LongType(), True),
    ])  # fmt: skip


def typed_batch(decoder: Decoder, batch: Any, segment: str, permissive: bool) -> Any:
    """An untyped read's record batch (``arrow.record_batch``) as a typed read's."""
    offsets = batch.column(4)

    def where(row: int) -> str:
        return f"{segment} offset {offsets[row].as_py()}"

    values, schema_ids = decoder.decode(batch.column(0), where, permissive)
    return pa.RecordBatch.from_arrays(
        [values, schema_ids, *batch.columns[1:5]], names=list(COLUMNS)
    )
