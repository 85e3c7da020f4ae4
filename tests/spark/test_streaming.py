"""Structured streaming through ``format("millrace")``: a query stopped and restarted from its
checkpoint delivers every event exactly once, across a scale of the stream; a streaming write
whose batch is replayed (the query died before Spark noted the batch as done) writes it once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import Standalone, request
from tests.spark.conftest import options
from tests.spark.test_batch import assert_in_key_order, open_transactions, read_back

pytestmark = pytest.mark.slow


#: Routing keys "0" to "19": enough that every quarter of the key space has some (the scale
#: test splits the lower half in two and expects events in both halves).
KEYS = 20


def write_events(
    node: Standalone, stream: str, tag: str, first: int, count: int, keys: int = KEYS
) -> None:
    """Events ``<tag>:<key>:<n>`` for n from ``first``: n grows in write order."""
    with StreamManager(node.base, token=node.token) as manager:
        writer = manager.create_writer("sp", stream)
        for n in range(first, first + count):
            writer.write_event(f"{tag}:{n % keys}:{n}", routing_key=str(n % keys))
        writer.flush()


def run_until_caught_up(writer: Any, checkpoint: Path) -> None:
    """Start the query from its checkpoint, let it process all there is, stop it."""
    query = writer.option("checkpointLocation", str(checkpoint)).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def run_read_query(spark: Any, node: Standalone, stream: str, checkpoint: Path, out: Path) -> None:
    frame = spark.readStream.format("millrace").options(**options(node, stream)).load()
    run_until_caught_up(frame.writeStream.format("parquet").option("path", str(out)), checkpoint)


def test_a_restarted_query_reads_every_event_once_across_a_scale(
    spark: Any, node: Standalone, tmp_path: Path
) -> None:
    with StreamManager(node.base, token=node.token) as manager:
        manager.create_scope("sp")
        manager.create_stream("sp", "live", initial_segments=2)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    write_events(node, "live", "a", 0, 1_000)
    run_read_query(spark, node, "live", checkpoint, out)
    write_events(node, "live", "b", 1_000, 1_000)
    segments = request(node.base, "GET", "/v1/scopes/sp/streams/live/segments", node.token)[1]
    first = segments["segments"][0]
    mid = (first["keyStart"] + first["keyEnd"]) / 2
    status, _ = request(
        node.base, "POST", "/v1/scopes/sp/streams/live/scale", node.token,
        {"sealedSegments": [first["segmentId"]],
         "newRanges": [[first["keyStart"], mid], [mid, first["keyEnd"]]]},
    )  # fmt: skip
    assert status == 200
    write_events(node, "live", "c", 2_000, 1_000)
    run_read_query(spark, node, "live", checkpoint, out)
    rows = spark.read.parquet(str(out)).collect()
    events = [r["event"].decode() for r in rows]
    assert len(events) == len(set(events)) == 3_000
    assert set(events) == {f"{'abc'[n // 1000]}:{n % KEYS}:{n}" for n in range(3_000)}
    assert len({r["segment_id"] for r in rows}) == 4  # two, then one of them split in two
    assert_in_key_order(rows)


def test_a_replayed_streaming_batch_is_written_once(
    spark: Any, node: Standalone, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()

    def add_file(name: str, first: int, count: int) -> None:
        lines = [json.dumps({"event": f"{name}:{n % 7}:{n}", "routing_key": str(n % 7)})
                 for n in range(first, first + count)]  # fmt: skip
        (source / f"{name}.json").write_text("\n".join(lines))

    def run() -> None:
        frame = spark.readStream.schema("event string, routing_key string").json(str(source))
        sink = frame.writeStream.format("millrace").options(
            **options(node, "sink", default_num_segments=2)
        )
        run_until_caught_up(sink, checkpoint)

    add_file("one", 0, 500)
    run()
    add_file("two", 500, 700)
    run()
    # as if the query had died after the batch's commit, before Spark noted it: Spark replays it
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    run()
    assert (checkpoint / "commits" / str(last)).exists()  # the batch ran again, and is noted
    rows = read_back(spark, node, "sink")
    events = sorted(r["event"].decode() for r in rows)
    assert events == sorted(f"{'one' if n < 500 else 'two'}:{n % 7}:{n}" for n in range(1_200))
    assert_in_key_order(rows)
    assert (checkpoint / "millrace" / f"{last}.json").exists()
    assert open_transactions(node) == 0


def test_approx_bytes_per_trigger_cuts_the_backlog_into_bounded_batches(
    spark: Any, node: Standalone, tmp_path: Path
) -> None:
    """A backlog of about 45 KB read with ``approx_bytes_per_trigger`` 10,000: several
    micro-batches, none much over the limit, every event once and per key in order."""
    with StreamManager(node.base, token=node.token) as manager:
        manager.create_scope("sp")
        manager.create_stream("sp", "backlog", initial_segments=2)
    write_events(node, "backlog", "x", 0, 3_000, keys=10)  # 12 to 16 bytes with the header
    frame = (
        spark.readStream.format("millrace")
        .options(**options(node, "backlog", approx_bytes_per_trigger=10_000))
        .load()
    )
    out = tmp_path / "out"
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    assert len(sizes) >= 5, sizes
    assert max(sizes) <= (10_000 + 2 * 16) // 12, sizes  # over by under an event a segment
    rows = spark.read.parquet(str(out)).collect()
    events = sorted(r["event"].decode() for r in rows)
    assert events == sorted(f"x:{n % 10}:{n}" for n in range(3_000))
    assert_in_key_order(rows)
