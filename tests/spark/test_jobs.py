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
