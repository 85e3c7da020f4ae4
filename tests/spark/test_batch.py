"""Batch reads and writes through ``format("millrace")`` on local Spark against a real
standalone node: round trips with per-key order, exactly once through failures, stream cuts
shared with the Python client, clear errors for bad options, records produced through Kafka's
protocol read as events."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
import uuid
from collections import defaultdict
from typing import Any

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import Standalone
from tests.spark.conftest import options

pytestmark = pytest.mark.slow


def events_frame(spark: Any, count: int, keys: int, tag: str = "e") -> Any:
    """``count`` events ``<tag>:<key>:<seq>``; each key's events in one partition, in order."""
    from pyspark.sql import functions as f

    return (
        spark.range(count)
        .select(
            (f.col("id") % keys).cast("string").alias("routing_key"),
            f.col("id").alias("seq"),
        )
        .repartition(4, "routing_key")
        .sortWithinPartitions("seq")
        .select(
            f.concat_ws(":", f.lit(tag), "routing_key", f.col("seq").cast("string")).alias("event"),
            "routing_key",
        )
    )


def read_back(spark: Any, node: Standalone, stream: str, **more: Any) -> list[Any]:
    frame = spark.read.format("millrace").options(**options(node, stream, **more)).load()
    return frame.collect()


def assert_in_key_order(rows: list[Any]) -> None:
    by_key: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for row in rows:
        _, key, seq = row["event"].decode().split(":")
        by_key[key].append((row["segment_id"], row["offset"], int(seq)))
    for key, found in by_key.items():
        seqs = [seq for _, _, seq in sorted(found)]
        assert seqs == sorted(seqs), f"key {key} out of order"


def open_transactions(node: Standalone) -> int:
    with sqlite3.connect(node.data_dir / "millrace.sqlite3") as db:
        (count,) = db.execute(
            "SELECT count(*) FROM controller_app_transaction WHERE state = 'OPEN'"
        ).fetchone()
    return int(count)


def test_a_round_trip_keeps_every_event_once_and_each_keys_order(
    spark: Any, node: Standalone
) -> None:
    frame = events_frame(spark, 20_000, keys=100)
    frame.write.format("millrace").options(**options(node, "trip", default_num_segments=3)).mode(
        "append"
    ).save()
    rows = read_back(spark, node, "trip")
    assert len(rows) == 20_000
    assert {r["event"].decode() for r in rows} == {f"e:{i % 100}:{i}" for i in range(20_000)}
    assert {(r["scope"], r["stream"]) for r in rows} == {("sp", "trip")}
    assert len({r["segment_id"] for r in rows}) == 3
    assert_in_key_order(rows)
    assert open_transactions(node) == 0


def test_a_retried_task_writes_nothing_twice(spark: Any, node: Standalone) -> None:
    from pyspark import TaskContext
    from pyspark.sql import functions as f

    def fail_once(event: str) -> str:
        context = TaskContext.get()
        if context.partitionId() == 0 and context.attemptNumber() == 0 and event.endswith(":500"):
            raise RuntimeError("injected failure, first attempt of partition 0")
        return event

    flaky = f.udf(fail_once, "string")
    frame = events_frame(spark, 4_000, keys=10)
    frame = frame.select(flaky("event").alias("event"), "routing_key")
    frame.write.format("millrace").options(**options(node, "retried")).mode("append").save()
    rows = read_back(spark, node, "retried")
    assert sorted(r["event"].decode() for r in rows) == sorted(
        f"e:{i % 10}:{i}" for i in range(4_000)
    )
    assert_in_key_order(rows)
    assert open_transactions(node) == 0


def test_a_failed_job_leaves_nothing_visible_and_no_open_transaction(
    spark: Any, node: Standalone
) -> None:
    from pyspark.sql import functions as f

    def always_fail(event: str) -> str:
        if event.endswith(":3000"):
            raise RuntimeError("injected failure, every attempt")
        return event

    broken = f.udf(always_fail, "string")
    frame = events_frame(spark, 4_000, keys=10).select(
        broken("event").alias("event"), "routing_key"
    )
    with pytest.raises(Exception, match="injected failure"):
        frame.write.format("millrace").options(**options(node, "failed")).mode("append").save()
    assert read_back(spark, node, "failed") == []
    assert open_transactions(node) == 0


def test_a_job_that_outlasts_its_transactions_lease_still_commits_every_task(
    spark: Any, node: Standalone
) -> None:
    """The first tasks' transactions wait for the job's commit far longer than their lease
    (1 s; the last task takes 13 s, past a run of the controller's sweep, every 10 s, which
    aborts a transaction whose lease ran out): their workers ping them until the commit."""
    from pyspark.sql import functions as f

    def slow_start(event: str) -> str:
        if event.endswith(":3000"):  # the last partition's first row
            import time

            time.sleep(13)
        return event

    slow = f.udf(slow_start, "string")
    frame = spark.range(0, 4_000, numPartitions=4).select(
        slow(f.format_string("e:%d:%d", f.col("id") % 10, f.col("id"))).alias("event"),
        (f.col("id") % 10).cast("string").alias("routing_key"),
    )
    opts = options(node, "long-job", transaction_timeout_ms=1_000)
    frame.write.format("millrace").options(**opts).mode("append").save()
    rows = read_back(spark, node, "long-job")
    assert sorted(r["event"].decode() for r in rows) == sorted(
        f"e:{i % 10}:{i}" for i in range(4_000)
    )
    assert open_transactions(node) == 0


def test_without_exactly_once_plain_writers_write(spark: Any, node: Standalone) -> None:
    frame = events_frame(spark, 1_000, keys=5)
    frame.write.format("millrace").options(**options(node, "plain", exactly_once="false")).mode(
        "append"
    ).save()
    rows = read_back(spark, node, "plain")
    assert len(rows) == 1_000
    assert_in_key_order(rows)


def test_stream_cuts_of_the_python_client_and_of_spark_interoperate(
    spark: Any, node: Standalone
) -> None:
    write = options(node, "cuts")
    events_frame(spark, 500, keys=5, tag="old").write.format("millrace").options(**write).mode(
        "append"
    ).save()
    with StreamManager(node.base, token=node.token) as manager:
        middle = manager.get_stream_cut("sp", "cuts", "tail")
        events_frame(spark, 300, keys=5, tag="new").write.format("millrace").options(**write).mode(
            "append"
        ).save()
        end = manager.get_stream_cut("sp", "cuts", "tail")
        manager.create_writer("sp", "cuts").write_event("after the end")
    between = read_back(
        spark, node, "cuts", start_stream_cut=middle.to_text(), end_stream_cut=end.to_text()
    )
    assert sorted(r["event"].decode() for r in between) == sorted(
        f"new:{i % 5}:{i}" for i in range(300)
    )
    before = read_back(spark, node, "cuts", end_stream_cut=middle.to_text())
    assert len(before) == 500 and all(r["event"].startswith(b"old:") for r in before)
    latest = read_back(spark, node, "cuts", start_stream_cut="latest")
    assert latest == []


@pytest.mark.parametrize(
    ("more", "message"),
    [
        ({"colour": "blue"}, "unknown option 'colour'"),
        ({"start_stream_cut": "yesterday"}, "option 'start_stream_cut' must be earliest"),
        ({"default_num_segments": "-1"}, "option 'default_num_segments' must be from 1"),
    ],
)
def test_bad_options_fail_the_job_with_a_clear_message(
    spark: Any, node: Standalone, more: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        spark.read.format("millrace").options(**options(node, "trip", **more)).load().collect()
    frame = spark.createDataFrame([("x",)], "payload string")
    with pytest.raises(Exception, match="needs an 'event' column"):
        frame.write.format("millrace").options(**options(node, "trip")).mode("append").save()


def test_metadata_lists_streams_and_gives_a_streams_cuts(spark: Any, node: Standalone) -> None:
    events_frame(spark, 100, keys=3).write.format("millrace").options(**options(node, "meta")).mode(
        "append"
    ).save()
    listing = (
        spark.read.format("millrace")
        .options(controller=node.base, token=node.token, scope="sp", metadata="Streams")
        .load()
        .collect()
    )
    assert ("sp", "meta") in {(r["scope"], r["stream"]) for r in listing}
    (info,) = (
        spark.read.format("millrace")
        .options(**options(node, "meta", metadata="StreamInfo"))
        .load()
        .collect()
    )
    with StreamManager(node.base, token=node.token) as manager:
        assert info["tail_stream_cut"] == manager.get_stream_cut("sp", "meta", "tail").to_text()
        assert info["head_stream_cut"] == manager.get_stream_cut("sp", "meta", "head").to_text()
    between = read_back(spark, node, "meta", start_stream_cut=info["head_stream_cut"],
                        end_stream_cut=info["tail_stream_cut"])  # fmt: skip
    assert len(between) == 100


def test_a_million_events_round_trip_in_key_order(spark: Any, node: Standalone) -> None:
    """The issue's proof at full size, checked inside Spark (no million rows on the driver)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as f

    count = 1_000_000
    frame = events_frame(spark, count, keys=1_000)
    frame.write.format("millrace").options(**options(node, "million", default_num_segments=4)).mode(
        "append"
    ).save()
    back = spark.read.format("millrace").options(**options(node, "million")).load()
    parts = f.split(f.col("event").cast("string"), ":")
    rows = back.select(
        parts[1].alias("key"), parts[2].cast("long").alias("seq"), "segment_id", "offset"
    )
    totals = rows.agg(f.count("*").alias("n"), f.countDistinct("seq").alias("distinct")).first()
    assert (totals["n"], totals["distinct"]) == (count, count)
    in_order = Window.partitionBy("key").orderBy("segment_id", "offset")
    behind = rows.withColumn("before", f.lag("seq").over(in_order)).where(
        f.col("before") > f.col("seq")
    )
    assert behind.count() == 0
    assert open_transactions(node) == 0


def test_a_workers_tasks_share_one_writer_and_a_failed_task_drops_it(node: Standalone) -> None:
    """``write_batches`` as an executor runs it, twice in one process: the second task uses
    the writer (connections, token, nodes) the first made; a task that fails closes it, so
    that a retry starts afresh, and leaves nothing of its events."""
    import pyarrow as pa

    from spark_bridge import source
    from spark_bridge.options import Options

    opts = Options.parse(options(node, "shared", allow_create_scope="true"))
    opts = dataclasses.replace(opts, transaction_timeout_ms=1_500)  # (pinged every 0.5 s)
    source.prepare_stream(opts)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([f"e{i}".encode() for i in range(100)]), pa.array([str(i) for i in range(100)])],
        names=["event", "routing_key"],
    )
    first = source.write_batches(opts, iter([batch]), "job-1")
    writers = source.task_writers(opts)
    second = source.write_batches(opts, iter([batch]), "job-1")
    assert source.task_writers(opts) is writers  # the same client, kept by the process

    def failing() -> Any:
        yield batch
        raise RuntimeError("injected: the task fails")

    with pytest.raises(RuntimeError, match="injected"):
        source.write_batches(opts, failing(), "job-1")
    assert source.task_writers(opts) is not writers  # dropped and made anew
    handed = {uuid.UUID(first.txn_id), uuid.UUID(second.txn_id)}
    assert handed <= set(source.LEASES.kept())  # alive until the driver commits them
    source.finish(opts, [first, second], commit=True)
    deadline = time.monotonic() + 10
    while handed & set(source.LEASES.kept()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not handed & set(source.LEASES.kept())  # committed: the controller refused the ping
    with StreamManager(node.base, token=node.token) as manager:
        reader = manager.create_reader("sp", "shared")
        got = [reader.read_next(timeout=10) for _ in range(200)]
        assert sorted(e.data for e in got) == sorted([f"e{i}".encode() for i in range(100)] * 2)
        assert reader.read_next(timeout=1) is None  # nothing of the failed task
        reader.close()
    source.forget_task_writers(opts)


def test_a_commit_finding_one_transaction_lapsed_commits_none(node: Standalone) -> None:
    """The driver commits every task's transaction in one request, all or none: one that
    lapsed (here aborted by hand, as the controller aborts one whose worker died) fails the job
    with nothing of it visible (committing them one by one committed the others)."""
    import pyarrow as pa

    from spark_bridge import source
    from spark_bridge.options import Options

    opts = Options.parse(options(node, "lapsed", allow_create_scope="true"))
    source.prepare_stream(opts)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([f"e{i}".encode() for i in range(50)]), pa.array([str(i) for i in range(50)])],
        names=["event", "routing_key"],
    )
    messages = [source.write_batches(opts, iter([batch]), "job-lapsed") for _ in range(3)]
    lapsed = uuid.UUID(messages[1].txn_id)
    source.task_writers(opts).abort_txn(lapsed)
    refused = f"cannot be committed: transaction {lapsed} (is|was) aborted"
    with pytest.raises(RuntimeError, match=refused):
        source.finish(opts, messages, commit=True, writer_id="job-lapsed")
    writers = source.task_writers(opts)
    assert [writers.txn_state(uuid.UUID(m.txn_id)) for m in messages] == ["OPEN", "ABORTED", "OPEN"]
    source.finish(opts, messages, commit=False, writer_id="job-lapsed")  # (Spark's abort)
    with StreamManager(node.base, token=node.token) as manager:
        reader = manager.create_reader("sp", "lapsed")
        assert reader.read_next(timeout=2) is None
        reader.close()
    assert open_transactions(node) == 0
    source.forget_task_writers(opts)


def test_a_stream_in_header_mode_refuses_a_jobs_unframed_rows(spark: Any, node: Standalone) -> None:
    """Spark writes are held to the stream's schema: a job with one row that has no schema
    header fails saying why, and leaves nothing visible; with the enforcement off, the same
    job writes every row."""
    from pyspark.sql import Row

    from tests.acceptance.standalone_node import request

    request(node.base, "POST", "/v1/scopes", node.token, {"scopeName": "typed"})
    body = {"streamName": "orders", "schema": {"enforcement": "header"}}
    status, answer = request(node.base, "POST", "/v1/scopes/typed/streams", node.token, body)
    assert status == 201, answer
    framed = b"\x00" + (123_456).to_bytes(4, "big") + b"\x02"  # an id no subject has
    frame = spark.createDataFrame(
        [Row(event=framed, routing_key="a"), Row(event=b"not framed", routing_key="b")]
    )
    write = frame.write.format("millrace").options(**options(node, "orders", scope="typed"))
    with pytest.raises(Exception, match="refused by the stream's schema enforcement"):
        write.mode("append").save()
    assert read_back(spark, node, "orders", scope="typed") == []
    path = "/v1/scopes/typed/streams/orders/schema"
    assert request(node.base, "PUT", path, node.token, {"enforcement": "none"})[0] == 200
    time.sleep(1.0)  # (a node reads a stream's policy again when what it read is 1 s old)
    write.mode("append").save()
    events = sorted(bytes(row["event"]) for row in read_back(spark, node, "orders", scope="typed"))
    assert events == sorted([framed, b"not framed"])


def test_records_produced_through_kafka_are_events_to_spark(spark: Any, node: Standalone) -> None:
    """A confluent-kafka producer writes a topic of three partitions; Spark reads its stream
    (scope ``kafka``): each record's value an event, each partition a segment in the order of
    its offsets."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.acceptance import kafka_clients as kc

    topic = f"sparked{uuid.uuid4().hex[:6]}"
    admin = AdminClient(kc.confluent(node))
    admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(30)
    producer = Producer(kc.confluent(node, **{"acks": "all"}))
    delivered: list[Any] = []
    for i in range(300):
        producer.produce(topic, key=f"k{i % 11}", value=f"record {i}",
                         on_delivery=lambda err, msg: delivered.append((err, msg)))  # fmt: skip
    assert producer.flush(30) == 0 and all(err is None for err, _ in delivered)

    rows = read_back(spark, node, topic, scope="kafka")
    assert sorted(r["event"].decode() for r in rows) == sorted(f"record {i}" for i in range(300))
    assert {r["segment_id"] for r in rows} == {0, 1, 2}
    for partition in range(3):  # (a partition's records in the order of their Kafka offsets)
        produced = sorted((m.offset(), m.value().decode()) for _, m in delivered
                          if m.partition() == partition)  # fmt: skip
        read = [r["event"].decode() for r in sorted(rows, key=lambda r: r["offset"])
                if r["segment_id"] == partition]  # fmt: skip
        assert read == [value for _, value in produced]
