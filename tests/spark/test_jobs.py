"""Bulk ingest and export: the jobs on the shared local Spark. ``millrace ingest`` and
``millrace export`` as a user types them are the Spark page's executed block
(``tests/acceptance/test_guides.py``); the README's Spark example runs as shown in
``test_readme_snippet.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_bridge.jobs.export import export
from spark_bridge.jobs.ingest import ingest
from tests.acceptance.standalone_node import Standalone
from tests.spark.conftest import options
from tests.spark.test_batch import assert_in_key_order, read_back

pytestmark = pytest.mark.slow


def orders(spark: Any, path: Path, count: int) -> None:
    frame = spark.range(count).selectExpr(
        "id as n", "concat('customer-', cast(id % 13 as string)) as customer",
        "concat('e:', cast(id % 13 as string), ':', cast(id as string)) as body",
    )  # fmt: skip
    frame.coalesce(1).sortWithinPartitions("n").write.parquet(str(path))


def test_ingest_then_export_round_trip(spark: Any, node: Standalone, tmp_path: Path) -> None:
    orders(spark, tmp_path / "orders", 3_000)
    write = {**options(node, "ingested"), "default_num_segments": "2"}
    summary = ingest(spark, [str(tmp_path / "orders")], write, key_column="customer",
                     event_column="body", show_progress=False)  # fmt: skip
    assert summary.events == 3_000 and summary.bytes > 0
    rows = read_back(spark, node, "ingested")
    assert sorted(r["event"].decode() for r in rows) == sorted(
        f"e:{n % 13}:{n}" for n in range(3_000)
    )
    assert_in_key_order(rows)
    out = tmp_path / "exported"
    done = export(spark, options(node, "ingested"), str(out), show_progress=False)
    assert done.events == 3_000
    exported = spark.read.parquet(str(out)).collect()
    assert sorted(r["event"] for r in exported) == sorted(r["event"] for r in rows)


def test_the_bulk_block_run_again_appends_and_its_export_overwrites(
    spark: Any, node: Standalone, tmp_path: Path
) -> None:
    """What the Spark page's bulk block does when a user runs it a second time (the executed
    page runs it once): the ingest, still asked to create the stream, appends to the one it
    made; the export with ``overwrite`` replaces the folder with every event so far; without
    it, an existing folder is refused and left as it was."""
    (tmp_path / "orders.json").write_text(
        "".join(f'{{"customer": "c-{n}", "body": "order {n}"}}\n' for n in (1, 2, 3))
    )
    write = {**options(node, "again"), "default_num_segments": "4"}
    out = tmp_path / "bulk-export"
    for attempt in (1, 2):
        summary = ingest(spark, [str(tmp_path / "orders.json")], write, fmt="json",
                         key_column="customer", event_column="body",
                         show_progress=False)  # fmt: skip
        assert summary.events == 3
        done = export(spark, options(node, "again"), str(out), show_progress=False,
                      overwrite=True)  # fmt: skip
        assert done.events == 3 * attempt
        assert spark.read.parquet(str(out)).count() == 3 * attempt
    with pytest.raises(Exception, match="already exists"):
        export(spark, options(node, "again"), str(out), show_progress=False)
    assert spark.read.parquet(str(out)).count() == 6


def test_ingest_without_an_event_column_writes_each_row_as_json(
    spark: Any, node: Standalone, tmp_path: Path
) -> None:
    (tmp_path / "in.csv").write_text("city,temp\nOslo,3\nLima,19\n")
    summary = ingest(spark, [str(tmp_path / "in.csv")], options(node, "csv"), fmt="csv",
                     key_column="city", show_progress=False)  # fmt: skip
    assert summary.events == 2
    events = sorted(r["event"].decode() for r in read_back(spark, node, "csv"))
    assert events == ['{"city":"Lima","temp":"19"}', '{"city":"Oslo","temp":"3"}']
    with pytest.raises(ValueError, match="--key-column 'town' is not a column"):
        ingest(spark, [str(tmp_path / "in.csv")], options(node, "csv"), fmt="csv",
               key_column="town", show_progress=False)  # fmt: skip


def test_typed_ingest_of_json_lines_and_typed_export_to_parquet(
    spark: Any, node: Standalone, tmp_path: Path
) -> None:
    """JSON lines into a stream whose subject has a schema: parsed with the schema's types
    (an ISO timestamp becomes a timestamp), encoded in Confluent's format; exported back as
    Parquet with typed columns. Without a schema, ``--register`` registers the input's."""
    import datetime
    import json

    from tests.acceptance.standalone_node import request

    schema = {"type": "record", "name": "Reading", "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "celsius", "type": "double"},
        {"name": "note", "type": "string", "default": "-"},
    ]}  # fmt: skip
    path = "/registry/subjects/sp.readings-value/versions"
    assert request(node.base, "POST", path, node.token, {"schema": json.dumps(schema)})[0] == 200
    lines = [{"sensor": f"s{n % 3}", "at": f"2026-11-29T10:00:0{n}Z", "celsius": n + 0.5}
             for n in range(6)]  # fmt: skip
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    write = {**options(node, "readings"), "default_num_segments": "2"}
    summary = ingest(spark, [str(tmp_path / "in.jsonl")], write, fmt="json",
                     key_column="sensor", show_progress=False, typed="schema")  # fmt: skip
    assert summary.events == 6 and summary.bytes is None
    raw = read_back(spark, node, "readings")
    assert {bytes(r["event"][:1]) for r in raw} == {b"\x00"}

    out = tmp_path / "exported"
    done = export(spark, options(node, "readings"), str(out), show_progress=False, typed=True)
    assert done.events == 6
    exported = spark.read.parquet(str(out))
    assert exported.schema.simpleString() == (
        "struct<sensor:string,at:timestamp,celsius:double,note:string,schema_id:int,"
        "segment_id:bigint,offset:bigint>"
    )
    rows = sorted(exported.collect(), key=lambda r: r["celsius"])
    first = datetime.datetime(2026, 11, 29, 10, 0, 0, tzinfo=datetime.UTC)
    assert [(r["sensor"], r["celsius"], r["note"]) for r in rows] == [
        (f"s{n % 3}", n + 0.5, "-") for n in range(6)
    ]
    assert rows[1]["at"].astimezone(datetime.UTC) == first + datetime.timedelta(seconds=1)

    registered = ingest(spark, [str(tmp_path / "in.jsonl")], options(node, "fresh"),
                        fmt="json", show_progress=False, typed="register")  # fmt: skip
    assert registered.events == 6
    status, latest = request(node.base, "GET", "/registry/subjects/sp.fresh-value/versions/latest",
                             node.token)  # fmt: skip
    assert status == 200 and json.loads(latest["schema"])["name"] == "topLevelRecord"
