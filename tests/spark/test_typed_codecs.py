"""A typed write's column-at-a-time Avro encoding (``spark_bridge.avro_arrow``) gives the
bytes fastavro gives for every row, bit for bit: each flat kind, both orders of a nullable
union, nulls, extreme and negative numbers, empty and non-ASCII strings; whatever it does not
take falls back to fastavro."""

from __future__ import annotations

import datetime
import io
import json
import random

import fastavro
import pyarrow as pa
import pytest

from spark_bridge import avro_arrow
from spark_bridge.typed import Binding, Encoder

UTC = datetime.UTC
SCHEMA = {
    "type": "record",
    "name": "Flat",
    "fields": [
        {"name": "l", "type": "long"},
        {"name": "i", "type": ["null", "int"]},
        {"name": "f", "type": ["float", "null"]},
        {"name": "d", "type": "double"},
        {"name": "b", "type": ["boolean", "null"]},
        {"name": "s", "type": ["null", "string"]},
        {"name": "y", "type": "bytes"},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ms", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "lus", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    ],
}


def _maybe(chance: random.Random, value: object) -> object:
    return None if chance.random() < 0.2 else value


def _rows(count: int) -> list[dict[str, object]]:
    chance = random.Random(46)
    edges = [0, -1, 1, 63, 64, -64, -65, 2**31 - 1, -(2**31), 2**62, -(2**63), 2**63 - 1]
    rows = []
    for n in range(count):
        moment = datetime.datetime(2026, 11, 29, tzinfo=UTC) + datetime.timedelta(
            microseconds=chance.randrange(-(10**15), 10**15)
        )
        rows.append({
            "l": edges[n % len(edges)] if n < 40 else chance.randrange(-(2**63), 2**63),
            "i": _maybe(chance, chance.randrange(-(2**31), 2**31)),
            "f": _maybe(chance, float(chance.randrange(-1000, 1000)) / 8),
            "d": chance.uniform(-1e300, 1e300),
            "b": _maybe(chance, chance.random() < 0.5),
            "s": _maybe(chance, "".join(chance.choice("aé€😀 ") for _ in range(n % 9))),
            "y": bytes(chance.randrange(256) for _ in range(n % 5)),
            "day": datetime.date(1970, 1, 1)
            + datetime.timedelta(days=chance.randrange(-(10**5), 10**5)),
            "ms": _maybe(chance, moment.replace(microsecond=moment.microsecond // 1000 * 1000)),
            "us": moment,
            "lus": moment.replace(tzinfo=None),
        })  # fmt: skip
    return rows


ARROW = pa.schema([
    ("l", pa.int64()), ("i", pa.int32()), ("f", pa.float32()), ("d", pa.float64()),
    ("b", pa.bool_()), ("s", pa.string()), ("y", pa.binary()), ("day", pa.date32()),
    ("ms", pa.timestamp("us", "UTC")), ("us", pa.timestamp("us", "UTC")),
    ("lus", pa.timestamp("us")),
])  # fmt: skip


def _fastavro(schema: object, header: bytes, rows: list[dict[str, object]]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for row in rows:
        buffer = io.BytesIO(header)
        buffer.seek(len(header))
        fastavro.schemaless_writer(buffer, parsed, row)
        out.append(buffer.getvalue())
    return out


def test_flat_records_are_encoded_as_fastavro_encodes_them() -> None:
    rows = _rows(3000)
    batch = pa.RecordBatch.from_pylist(rows, schema=ARROW)
    header = b"\x00\x00\x00\x01\x02"
    fields = avro_arrow.plan(fastavro.parse_schema(SCHEMA))
    assert fields is not None
    encoded = avro_arrow.encode(
        fields, dict(zip(ARROW.names, batch.columns, strict=True)), header, len(rows)
    )
    assert encoded is not None
    assert encoded.to_pylist() == _fastavro(SCHEMA, header, rows)
    # a slice of a batch (Arrow offsets that do not start at 0)
    part = batch.slice(1001, 500)
    encoded = avro_arrow.encode(
        fields, dict(zip(ARROW.names, part.columns, strict=True)), header, 500
    )
    assert encoded.to_pylist() == _fastavro(SCHEMA, header, rows[1001:1501])


@pytest.mark.parametrize(
    "field",
    [
        {"name": "x", "type": {"type": "map", "values": "long"}},
        {"name": "x", "type": ["null", "long", "string"]},
        {"name": "x", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
        {"name": "x", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4}},
        {"name": "x", "type": {"type": "array", "items": "long"}},
    ],
)
def test_other_kinds_are_left_to_fastavro(field: dict[str, object]) -> None:
    schema = {"type": "record", "name": "R", "fields": [field]}
    assert avro_arrow.plan(fastavro.parse_schema(schema)) is None


def test_the_encoder_falls_back_to_fastavro_and_names_a_row_that_does_not_fit() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}
    encoder = Encoder(Binding("s-value", 1, 9, json.dumps(schema)))
    fine = encoder.events(pa.RecordBatch.from_pydict({"n": [1, -2]}))
    assert fine.column(0).to_pylist() == _fastavro(schema, b"\x00\x00\x00\x00\x09",
                                                    [{"n": 1}, {"n": -2}])  # fmt: skip
    with pytest.raises(ValueError, match=r"row 1 of a batch does not fit the schema of 's-value'"):
        encoder.events(pa.RecordBatch.from_pydict({"n": pa.array([1, None], pa.int64())}))
    with pytest.raises(ValueError, match=r"row 0 of a batch does not fit"):
        encoder.events(pa.RecordBatch.from_pydict({"n": ["one", "two"]}))


def test_a_batch_of_the_readers_schema_decodes_at_once_as_one_by_one() -> None:
    """Events of the reader's own schema are decoded by Polars' columnar reader; the values
    are those fastavro gives one event at a time (with the Spark types' Arrow form)."""
    from spark_bridge.typed import Decoder

    rows = _rows(2000)
    header = b"\x00\x00\x00\x00\x07"
    events = pa.array(_fastavro(SCHEMA, header, rows), pa.binary())
    decoder = Decoder(Binding("s-value", 1, 7, json.dumps(SCHEMA)), fetch=lambda i: {})
    assert decoder.columnar

    def where(row: int) -> str:
        return f"row {row}"

    at_once = decoder._columnar(b"".join(e[5:] for e in events.to_pylist()), len(events))
    decoder.columnar = False
    values, ids = decoder.decode(events, where, permissive=False)
    assert ids.to_pylist() == [7] * len(rows)
    assert at_once.to_pylist() == values.to_pylist()
    assert values.to_pylist()[5]["s"] == rows[5]["s"]
