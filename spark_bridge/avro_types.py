"""Avro schemas as Spark types, and Spark types as Avro schemas, mapped as Spark's own
``from_avro`` / ``to_avro`` map them (its ``SchemaConverters``).

Avro to Spark: a record is a struct (every field nullable, as ``from_avro`` gives them), an
array an array, a map a map with string keys, an enum a string, ``fixed`` and ``bytes`` binary;
a union of one type and ``null`` is that type, of ``int`` and ``long`` a long, of ``float``
and ``double`` a double, and any other union a struct with a field ``member0``, ``member1``
... per branch other than ``null`` (one of them set). Logical types: ``decimal`` a decimal of
its precision and scale, ``date`` a date, ``timestamp-millis``/``-micros`` a timestamp,
``local-timestamp-*`` a timestamp without time zone; ``time-*`` stay the int or long they are
(Spark has no time of day). A recursive schema has no Spark type, and is refused.

Spark to Avro (a typed write registering the DataFrame's own schema): the top level is the
record ``topLevelRecord``, a nullable column a union of its type and ``null``, a timestamp
``timestamp-micros``, a decimal a ``bytes`` decimal.
"""

from __future__ import annotations

import copy
from typing import Any

from pyspark.sql import types as T

__all__ = [
    "SchemaTypeError",
    "avro_of",
    "fullname",
    "named_types",
    "polars_reads",
    "spark_type",
    "without_time",
]

PRIMITIVES: dict[str, T.DataType] = {
    "null": T.NullType(),
    "boolean": T.BooleanType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "bytes": T.BinaryType(),
    "string": T.StringType(),
}
#: Logical types with a Spark type of their own, by the Avro type they annotate.
LOGICAL: dict[tuple[str, str], T.DataType] = {
    ("int", "date"): T.DateType(),
    ("long", "timestamp-millis"): T.TimestampType(),
    ("long", "timestamp-micros"): T.TimestampType(),
    ("long", "local-timestamp-millis"): T.TimestampNTZType(),
    ("long", "local-timestamp-micros"): T.TimestampNTZType(),
}
TIME_OF_DAY = ("time-millis", "time-micros")
NAMED = ("record", "enum", "fixed")
#: Spark's name for the top-level record of a DataFrame turned into Avro.
TOP_RECORD = "topLevelRecord"


class SchemaTypeError(ValueError):
    """An Avro schema with no Spark type, or a Spark type with no Avro schema."""


def fullname(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def named_types(schema: Any) -> dict[str, Any]:
    """The named types (records, enums, fixed) a schema defines, by full name."""
    found: dict[str, Any] = {}

    def walk(node: Any, namespace: str) -> None:
        if isinstance(node, list):
            for branch in node:
                walk(branch, namespace)
            return
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        if kind in NAMED:
            name = fullname(str(node["name"]), str(node.get("namespace", namespace)))
            found[name] = node
            namespace = name.rpartition(".")[0]
        for field in node.get("fields", ()) if kind == "record" else ():
            walk(field["type"], namespace)
        walk(node.get("items"), namespace)
        walk(node.get("values"), namespace)
        if isinstance(kind, (dict, list)):
            walk(kind, namespace)

    walk(schema, "")
    return found


def spark_type(schema: Any) -> T.DataType:
    """The Spark type of a (JSON-parsed) Avro schema."""
    return _Converter(named_types(schema)).convert(schema, "", ())


class _Converter:
    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named

    def convert(self, node: Any, namespace: str, path: tuple[str, ...]) -> T.DataType:
        if isinstance(node, list):
            return self.union(node, namespace, path)
        if isinstance(node, str):
            if node in PRIMITIVES:
                return PRIMITIVES[node]
            name = self.lookup(node, namespace)
            if name in path:
                raise SchemaTypeError(f"the schema is recursive ({name} holds itself)")
            return self.convert(self.named[name], name.rpartition(".")[0], path)
        if not isinstance(node, dict) or "type" not in node:
            raise SchemaTypeError(f"not an Avro schema: {node!r}")
        kind, logical = node["type"], node.get("logicalType")
        if isinstance(kind, (dict, list)):
            return self.convert(kind, namespace, path)
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = int(node.get("precision", 0)), int(node.get("scale", 0))
            if not 0 < precision <= 38 or not 0 <= scale <= precision:
                raise SchemaTypeError(
                    f"a decimal of precision {precision} and scale {scale} has no Spark type"
                    " (precision 1 to 38)"
                )
            return T.DecimalType(precision, scale)
        if (kind, logical) in LOGICAL:
            return LOGICAL[(kind, logical)]
        if kind in NAMED:
            name = fullname(str(node["name"]), str(node.get("namespace", namespace)))
            namespace, path = name.rpartition(".")[0], (*path, name)
        if kind == "record":
            return T.StructType([
                T.StructField(str(f["name"]), self.convert(f["type"], namespace, path), True)
                for f in node.get("fields", ())
            ])  # fmt: skip
        if kind == "enum":
            return T.StringType()
        if kind == "fixed":
            return T.BinaryType()
        if kind == "array":
            return T.ArrayType(self.convert(node["items"], namespace, path), True)
        if kind == "map":
            return T.MapType(T.StringType(), self.convert(node["values"], namespace, path), True)
        return self.convert(kind, namespace, path)

    def union(self, branches: list[Any], namespace: str, path: tuple[str, ...]) -> T.DataType:
        rest = [b for b in branches if b != "null"]
        if len(rest) == 1:
            return self.convert(rest[0], namespace, path)
        if set(map(str, rest)) == {"int", "long"}:
            return T.LongType()
        if set(map(str, rest)) == {"float", "double"}:
            return T.DoubleType()
        return T.StructType([
            T.StructField(f"member{i}", self.convert(b, namespace, path), True)
            for i, b in enumerate(rest)
        ])  # fmt: skip

    def lookup(self, name: str, namespace: str) -> str:
        for candidate in (fullname(name, namespace), name):
            if candidate in self.named:
                return candidate
        raise SchemaTypeError(f"the schema names a type it does not define: {name!r}")


def without_time(schema: Any) -> Any:
    """A copy of the schema with ``time-*`` logical types dropped: their values are decoded
    as the int or long they are, which is their Spark type."""
    copied = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if node.get("logicalType") in TIME_OF_DAY:
                del node["logicalType"]
            for value in node.values():
                if isinstance(value, (dict, list)):
                    walk(value)

    walk(copied)
    return copied


def polars_reads(schema: Any) -> bool:
    """Whether Polars' Avro reader (the fast, columnar one) takes the schema: a record at the
    top, with no map and no union other than of one type and ``null`` anywhere in it."""
    if not (isinstance(schema, dict) and schema.get("type") == "record"):
        return False

    def fits(node: Any) -> bool:
        if isinstance(node, list):
            return (
                len(node) <= 2
                and sum(b == "null" for b in node) == len(node) - 1
                and all(fits(b) for b in node)
            )
        if isinstance(node, dict):
            if node.get("type") == "map":
                return False
            if node.get("type") == "record":
                return all(fits(f["type"]) for f in node.get("fields", ()))
            return all(
                fits(node[k]) for k in ("items", "type") if isinstance(node.get(k), (dict, list))
            )
        return True

    return fits(schema)


def avro_of(struct: T.StructType) -> dict[str, Any]:
    """The Avro record schema of a DataFrame's columns (Spark's ``to_avro`` mapping)."""
    return _avro_record(struct, TOP_RECORD, "")


def _avro_record(struct: T.StructType, name: str, namespace: str) -> dict[str, Any]:
    inner = fullname(name, namespace)
    fields = []
    for field in struct.fields:
        kind = _avro(field.dataType, field.name, inner)
        fields.append({"name": field.name, "type": [kind, "null"] if field.nullable else kind})
    record: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
    if namespace:
        record["namespace"] = namespace
    return record


def _avro(kind: T.DataType, name: str, namespace: str) -> Any:
    for avro, spark in PRIMITIVES.items():
        if avro != "null" and kind == spark:
            return avro
    if isinstance(kind, (T.ByteType, T.ShortType)):
        return "int"
    if isinstance(kind, T.DateType):
        return {"type": "int", "logicalType": "date"}
    if isinstance(kind, T.TimestampType):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if isinstance(kind, T.TimestampNTZType):
        return {"type": "long", "logicalType": "local-timestamp-micros"}
    if isinstance(kind, T.DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": kind.precision,
                "scale": kind.scale}  # fmt: skip
    if isinstance(kind, T.StructType):
        return _avro_record(kind, name, namespace)
    if isinstance(kind, T.ArrayType):
        items = _avro(kind.elementType, name, namespace)
        return {"type": "array", "items": [items, "null"] if kind.containsNull else items}
    if isinstance(kind, T.MapType) and isinstance(kind.keyType, T.StringType):
        values = _avro(kind.valueType, name, namespace)
        return {"type": "map", "values": [values, "null"] if kind.valueContainsNull else values}
    raise SchemaTypeError(f"column {name!r}: Spark's {kind.simpleString()} has no Avro type")
