"""Bulk ingest and export: the jobs on the shared local Spark, and ``millrace ingest`` /
``millrace export`` as a user types them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from millrace.client.manager import StreamManager
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


def test_the_commands_as_a_user_types_them(spark: Any, node: Standalone, tmp_path: Path) -> None:
    orders(spark, tmp_path / "orders", 500)
    command = [sys.executable, "-m", "millrace.ops.cli"]
    auth = ["--url", node.base, "--token", node.token]
    done = subprocess.run(
        [*command, "ingest", str(tmp_path / "orders"), "--stream", "sp/cli", "--create",
         "--segments", "2", "--key-column", "customer", "--event-column", "body", *auth],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ingested into sp/cli: 500 events" in done.stdout
    assert "ingest" in done.stderr  # the progress bar
    with StreamManager(node.base, token=node.token) as manager:
        cut = manager.get_stream_cut("sp", "cli", "tail")
    done = subprocess.run(
        [*command, "export", "sp/cli", "--to", str(tmp_path / "out"), "--format", "json",
         "--until", cut.to_text(), *auth],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exported sp/cli to" in done.stdout and "500 events" in done.stdout
    assert len(spark.read.json(str(tmp_path / "out")).collect()) == 500
    line = subprocess.run(
        [*command, "ingest", "in.parquet", "--stream", "sp/cli", "--spark-submit", *auth],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert line.startswith("spark-submit ") and "spark_bridge/jobs/ingest.py" in line
    assert node.token not in line and '"$MILLRACE_TOKEN"' in line


def test_the_readmes_spark_example_runs(
    spark: Any, node: Standalone, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = text.split("## Spark", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    with StreamManager(node.base, token=node.token) as manager:
        manager.create_scope("demo")
        manager.create_stream("demo", "orders", initial_segments=2)
        writer = manager.create_writer("demo", "orders")
        for i in range(100):
            writer.write_event(f"order {i}", routing_key=f"customer-{i % 10}")
        writer.flush()
    monkeypatch.chdir(node.data_dir.parent)  # where the example finds data/admin-token
    exec(block.replace("http://127.0.0.1:9091", node.base), {"spark": spark})
    copied = read_back(spark, node, "orders-copy", scope="demo")
    assert sorted(r["event"] for r in copied) == sorted(f"order {i}".encode() for i in range(100))
