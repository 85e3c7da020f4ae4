"""Typed Spark (``schema=registry``) against a standalone node and local Spark: events
produced by Confluent's own ``AvroSerializer`` under three versions of a subject read as typed
columns with the newest version's defaults filled in; a typed write read back by Confluent's
``AvroDeserializer``; a streaming query over a typed stream; events that do not decode fail
the read naming them, or become null rows (``mode=PERMISSIVE``)."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import Standalone
from tests.spark.conftest import options

ID = {"name": "id", "type": "long"}
NAME = {"name": "name", "type": "string"}
AMOUNT = {
    "name": "amount",
    "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
    "default": "\u0000",
}
TAGS = {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}
KIND = {
    "name": "kind",
    "type": {"type": "enum", "name": "Kind", "symbols": ["NEW", "OLD"]},
    "default": "NEW",
}
DAY = {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None}
AT = {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0}
VERSIONS = [
    {"type": "record", "name": "Order", "namespace": "shop", "fields": [ID, NAME]},
    {"type": "record", "name": "Order", "namespace": "shop", "fields": [ID, NAME, AMOUNT, TAGS]},
    {"type": "record", "name": "Order", "namespace": "shop",
     "fields": [ID, NAME, AMOUNT, TAGS, KIND, DAY, AT]},
]  # fmt: skip
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def registry(node: Standalone) -> SchemaRegistryClient:
    password = (node.data_dir / "admin-password").read_text().strip()
    return SchemaRegistryClient(
        {"url": f"{node.base}/registry", "basic.auth.user.info": f"admin:{password}"}
    )


def _produce(node: Standalone, scope: str, events: list[bytes]) -> None:
    with StreamManager(node.base, token=node.token) as manager:
        manager.create_scope(scope)
        manager.create_stream(scope, "orders", 2)
        with manager.create_writer(scope, "orders") as writer:
            for number, event in enumerate(events):
                writer.write_event(event, routing_key=f"k{number % 5}")
            writer.flush()


def _rows(spark: Any, node: Standalone, scope: str, **more: Any) -> list[Any]:
    frame = spark.read.format("millrace").options(
        **options(node, "orders", scope=scope, schema="registry", **more)
    )
    return frame.load().collect()


def test_events_of_three_versions_read_as_the_newest_with_its_defaults(
    spark: Any, node: Standalone, registry: SchemaRegistryClient
) -> None:
    scope = f"ty{uuid.uuid4().hex[:8]}"
    context = SerializationContext(f"{scope}.orders", MessageField.VALUE)
    events, ids = [], []
    for version, schema in enumerate(VERSIONS):
        serialize = AvroSerializer(registry, json.dumps(schema))
        for n in range(4):
            order: dict[str, Any] = {"id": version * 10 + n, "name": f"v{version}-{n}"}
            if version >= 1:
                order |= {"amount": decimal.Decimal(f"{n}.25"), "tags": ["a"] * n}
            if version == 2:
                order |= {"kind": "OLD", "day": datetime.date(2026, 11, n + 1),
                          "at": EPOCH + datetime.timedelta(seconds=n)}  # fmt: skip
            events.append(serialize(order, context))
        ids.append(int.from_bytes(events[-1][1:5], "big"))
    _produce(node, scope, events)

    frame = spark.read.format("millrace").options(
        **options(node, "orders", scope=scope, schema="registry")
    )
    value = frame.load().schema["value"].dataType
    assert value.simpleString() == (
        "struct<id:bigint,name:string,amount:decimal(9,2),tags:array<string>,kind:string,"
        "day:date,at:timestamp>"
    )
    rows = {row["value"]["id"]: row for row in frame.load().collect()}
    assert len(rows) == 12
    for version in range(3):
        for n in range(4):
            row = rows[version * 10 + n]
            value = row["value"].asDict()
            assert row["schema_id"] == ids[version]
            assert value["name"] == f"v{version}-{n}"
            # the newest version's defaults fill what older versions did not write
            amount = decimal.Decimal(f"{n}.25") if version else decimal.Decimal("0.00")
            assert value["amount"] == amount
            assert value["tags"] == (["a"] * n if version else [])
            assert value["kind"] == ("OLD" if version == 2 else "NEW")
            assert value["day"] == (datetime.date(2026, 11, n + 1) if version == 2 else None)
            at = EPOCH + datetime.timedelta(seconds=n if version == 2 else 0)
            assert value["at"].replace(tzinfo=None) == at.astimezone().replace(tzinfo=None)

    # pinned to the first version, the newer events lose the fields it does not have
    pinned = _rows(spark, node, scope, schema_version=1)
    assert {tuple(row["value"]) for row in pinned} == {
        (version * 10 + n, f"v{version}-{n}") for version in range(3) for n in range(4)
    }


def test_maps_and_unions_of_several_types_are_typed_as_spark_does_them(
    spark: Any, node: Standalone, registry: SchemaRegistryClient
) -> None:
    """Schemas Polars' columnar reader does not take (a map, a union of two types) are
    decoded one event at a time: the same columns."""
    scope = f"ty{uuid.uuid4().hex[:8]}"
    schema = {"type": "record", "name": "Reading", "fields": [
        {"name": "labels", "type": {"type": "map", "values": "long"}},
        {"name": "reading", "type": ["null", "long", "string"]},
        {"name": "rate", "type": ["int", "long"]},
    ]}  # fmt: skip
    serialize = AvroSerializer(registry, json.dumps(schema))
    context = SerializationContext(f"{scope}.orders", MessageField.VALUE)
    given = [
        {"labels": {"a": 1, "b": 2}, "reading": 7, "rate": 1},
        {"labels": {}, "reading": "high", "rate": 2**40},
        {"labels": {"c": 3}, "reading": None, "rate": 3},
    ]
    _produce(node, scope, [serialize(one, context) for one in given])
    rows = _rows(spark, node, scope)
    assert rows[0]["value"].__fields__ == ["labels", "reading", "rate"]
    found = sorted(
        ((r["value"]["rate"], dict(r["value"]["labels"]), r["value"]["reading"]) for r in rows),
        key=lambda one: one[0],
    )
    assert found == [
        (1, {"a": 1, "b": 2}, (7, None)),
        (3, {"c": 3}, None),
        (2**40, {}, (None, "high")),
    ]


def test_a_typed_write_is_read_back_by_confluents_deserializer(
    spark: Any, node: Standalone, registry: SchemaRegistryClient
) -> None:
    """A DataFrame written with ``schema=registry``: with ``auto_register_schemas`` its own
    schema is registered and its rows encoded in Confluent's format; without, the subject's
    latest version is used. Confluent's ``AvroDeserializer`` reads both back."""
    from pyspark.sql import Row

    scope = f"tw{uuid.uuid4().hex[:8]}"
    frame = spark.createDataFrame([
        Row(id=n, name=f"n{n}", price=decimal.Decimal(f"{n}.50"), day=datetime.date(2026, 1, n + 1),
            routing_key=f"k{n % 3}")
        for n in range(20)
    ])  # fmt: skip
    opts = options(node, "orders", scope=scope, schema="registry", auto_register_schemas="true")
    frame.write.format("millrace").options(**opts).mode("append").save()
    latest = registry.get_latest_version(f"{scope}.orders-value")
    assert json.loads(latest.schema.schema_str)["name"] == "topLevelRecord"

    again = frame.limit(5).drop("routing_key")  # the subject's latest version, not registering
    opts = options(node, "orders", scope=scope, schema="registry")
    again.write.format("millrace").options(**opts).mode("append").save()

    deserialize = AvroDeserializer(registry)
    context = SerializationContext(f"{scope}.orders", MessageField.VALUE)
    with StreamManager(node.base, token=node.token) as manager:
        reader = manager.create_reader(scope, "orders")
        events = []
        while (event := reader.read_next(timeout=2.0)) is not None:
            events.append(event.data)
    decoded = sorted((deserialize(e, context) for e in events), key=lambda d: (d["id"], d["name"]))
    assert len(decoded) == 25
    assert decoded[0] == {"id": 0, "name": "n0", "price": decimal.Decimal("0.50"),
                          "day": datetime.date(2026, 1, 1)}  # fmt: skip
    assert {e[1:5] for e in events} == {latest.schema_id.to_bytes(4, "big")}


def test_a_streaming_query_reads_a_typed_stream(
    spark: Any, node: Standalone, registry: SchemaRegistryClient, tmp_path: Any
) -> None:
    scope = f"ts{uuid.uuid4().hex[:8]}"
    serialize = AvroSerializer(registry, json.dumps(VERSIONS[0]))
    context = SerializationContext(f"{scope}.orders", MessageField.VALUE)
    _produce(node, scope, [serialize({"id": n, "name": f"s{n}"}, context) for n in range(6)])
    stream = (
        spark.readStream.format("millrace")
        .options(**options(node, "orders", scope=scope, schema="registry"))
        .load()
    )
    query = (
        stream.select("value.id", "value.name", "schema_id")
        .writeStream.format("memory").queryName(f"typed_{scope}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )  # fmt: skip
    try:
        query.processAllAvailable()
        rows = spark.sql(f"SELECT * FROM typed_{scope}").collect()
    finally:
        query.stop()
    assert sorted((r["id"], r["name"]) for r in rows) == [(n, f"s{n}") for n in range(6)]


def test_an_event_that_does_not_decode_fails_the_read_or_is_a_null_row(
    spark: Any, node: Standalone, registry: SchemaRegistryClient
) -> None:
    scope = f"tb{uuid.uuid4().hex[:8]}"
    serialize = AvroSerializer(registry, json.dumps(VERSIONS[0]))
    context = SerializationContext(f"{scope}.orders", MessageField.VALUE)
    good = serialize({"id": 1, "name": "fine"}, context)
    with StreamManager(node.base, token=node.token) as manager:
        manager.create_scope(scope)
        manager.create_stream(scope, "orders", 1)
        with manager.create_writer(scope, "orders") as writer:
            for event in (good, b"no header", good[:5] + b"\xff"):
                writer.write_event(event)
            writer.flush()
    with pytest.raises(
        Exception, match=r"orders/0\S* offset \d+: the event is not in Confluent's wire"
    ):
        _rows(spark, node, scope)
    rows = sorted(_rows(spark, node, scope, mode="PERMISSIVE"), key=lambda r: r["offset"])
    assert [(r["value"] and r["value"]["name"], r["schema_id"]) for r in rows] == [
        ("fine", int.from_bytes(good[1:5], "big")),
        (None, None),
        (None, int.from_bytes(good[1:5], "big")),
    ]


def test_typed_options_are_checked(
    spark: Any, node: Standalone, registry: SchemaRegistryClient
) -> None:
    scope = f"to{uuid.uuid4().hex[:8]}"
    _produce(node, scope, [b"x"])
    with pytest.raises(Exception, match=r"subject '.*orders-value' .* has no version latest"):
        _rows(spark, node, scope)
    registry.register_schema(
        f"{scope}.orders-value",
        __import__("confluent_kafka.schema_registry", fromlist=["Schema"]).Schema(
            json.dumps({"type": "object"}), "JSON"
        ),
    )
    with pytest.raises(Exception, match="holds JSON schemas; typed Spark reads and writes Avro"):
        _rows(spark, node, scope)
    with pytest.raises(Exception, match="option 'schema' must be none or registry"):
        spark.read.format("millrace").options(
            **options(node, "orders", scope=scope, schema="x")
        ).load()
