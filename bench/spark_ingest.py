"""Spark writes and reads: Millrace (exactly once) beside Parquet on local disk, one run.

Target (issue 16, section 5): with the same DataFrame (``--events`` events of ``--size`` bytes
with ``--keys`` routing keys), Millrace's write rate (exactly once) and read rate are each at
least half of Parquet's on local disk.

It starts a standalone node (embedded defaults), a local Spark (``local[2]``), builds the
DataFrame once (cached in memory, so neither side pays for making it), warms both sides up
with a tenth of the events each (Spark's one-time costs: the JIT, the Python workers'
start-up), then, ``--trials`` times (default 5), in turn: writes it to Parquet (a new
directory), writes it to a Millrace stream with ``format("millrace")`` (a new stream), writes
it to a data source that drops every row (what Spark alone spends handing rows to any Python
data source: the floor under Millrace's write, printed beside it), reads the Parquet files
back, reads the stream back (each read sums the events' lengths, so every event is
materialised) and counts the stream's events. It prints each trial and the median time of
each step, events/s and MiB/s of the medians, and the ratios of the medians (single runs of
either side vary by up to 40 % on a 2-core virtual machine).

Usage::

    .venv/bin/python bench/spark_ingest.py                              # 10,000,000 events
    .venv/bin/python bench/spark_ingest.py --events 1000000 --segments 4
    .venv/bin/python bench/spark_ingest.py \
        --spark-conf spark.sql.execution.arrow.maxBytesPerBatch=2147483647  # see spark.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.services import rest_call, standalone_node

#: The timed steps of a trial, in order.
STEPS = ("write_parquet", "write_millrace", "write_dropped", "read_parquet", "read_millrace")


def dropping_source() -> Any:
    """A Python data source whose writer drops every Arrow batch Spark hands it: what Spark
    itself spends handing a DataFrame to any Python data source (its JVM turns the rows into
    Arrow batches and sends them to the Python workers), the floor under Millrace's write."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class DroppingWriter(DataSourceArrowWriter):  # type: ignore[misc]
        def write(self, iterator: Any) -> Any:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class DroppingSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "bench_dropped"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return DroppingWriter()

    return DroppingSource


def timed(what: str, action: Any) -> float:
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    print(f"  {what}: {seconds:.1f} s", flush=True)
    return seconds


def _arguments() -> tuple[argparse.Namespace, dict[str, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--size", type=int, default=100, help="bytes per event")
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=8, help="Spark partitions written")
    parser.add_argument("--trials", type=int, default=5, help="runs of each step (medians kept)")
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE",
        help="a Spark setting for the session (both sides run under it); repeatable",
    )  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    settings = dict(item.partition("=")[::2] for item in args.spark_conf)
    if any(not key or not value for key, value in settings.items()):
        parser.error("--spark-conf wants KEY=VALUE, e.g. spark.sql.shuffle.partitions=8")
    return args, settings


def _session(settings: dict[str, str]) -> Any:
    from pyspark.sql import SparkSession

    import spark_bridge

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]").appName("millrace-bench")
        .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )  # fmt: skip
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark_bridge.register(spark)
    spark.dataSource.register(dropping_source())
    return spark


def _events(spark: Any, args: argparse.Namespace) -> Any:
    """The events to write, made once and cached: ``args.events`` of ``args.size`` bytes."""
    from pyspark.sql import functions as f

    pad = "x" * max(args.size - 24, 0)
    label = f.format_string("%012d:%010d:", f.col("id") % args.keys, f.col("id"))
    frame = spark.range(args.events, numPartitions=args.partitions).select(
        f.concat(label, f.lit(pad)).alias("event"),
        (f.col("id") % args.keys).cast("string").alias("routing_key"),
    )
    frame = frame.cache()
    frame.count()
    return frame


def _warm_up(spark: Any, frame: Any, work: Path, options: dict[str, str], events: int) -> None:
    """A warm-up of each side (a tenth of the events, at most 1,000,000, written and read
    back), so that no timed job pays Spark's one-time costs: the JIT (after 10,000 events, the
    first trial's Parquet write still took up to twice the third's) and the Python workers'
    start-up (two partitions, so that both of local[2]'s workers start: with one, the first
    timed write waited ~2 s for the second)."""
    warm = frame.limit(min(events // 10, 1_000_000)).repartition(2)
    warm.write.parquet(str(work / "warm"))
    spark.read.parquet(str(work / "warm")).count()
    warm_options = {**options, "stream": "warm"}
    warm.write.format("millrace").options(**warm_options).mode("append").save()
    warm.write.format("bench_dropped").mode("append").save()
    spark.read.format("millrace").options(**warm_options).load().count()


def _trial(
    spark: Any, frame: Any, parquet: Path, stream: dict[str, str],
    steps: dict[str, list[float]], events: int,
) -> None:  # fmt: skip
    """One run of each step, its seconds added to ``steps``."""
    from pyspark.sql import functions as f

    steps["write_parquet"].append(timed("write parquet", lambda: frame.write.parquet(str(parquet))))
    steps["write_millrace"].append(timed(
        "write millrace (exactly once)",
        lambda: frame.write.format("millrace").options(**stream).mode("append").save(),
    ))  # fmt: skip
    steps["write_dropped"].append(timed(
        "write to a data source that drops the rows (Spark's hand-off alone)",
        lambda: frame.write.format("bench_dropped").mode("append").save(),
    ))  # fmt: skip
    steps["read_parquet"].append(timed(
        "read parquet", lambda: spark.read.parquet(str(parquet))
        .select(f.sum(f.length("event"))).collect()
    ))  # fmt: skip
    steps["read_millrace"].append(timed(
        "read millrace", lambda: spark.read.format("millrace").options(**stream)
        .load().select(f.sum(f.length("event"))).collect()
    ))  # fmt: skip
    count = spark.read.format("millrace").options(**stream).load().count()
    if count != events:
        raise RuntimeError(f"read back {count} events, wrote {events}")
    shutil.rmtree(parquet, ignore_errors=True)


def _report(results: dict[str, Any], steps: dict[str, list[float]], args: Any) -> None:
    megabytes = args.events * args.size / 2**20
    median: dict[str, float] = {}
    for name in STEPS:
        median[name] = seconds = statistics.median(steps[name])
        results[name] = {"seconds": round(seconds, 2),
                         "events_per_s": round(args.events / seconds),
                         "mib_per_s": round(megabytes / seconds, 1),
                         "trials": [round(t, 2) for t in steps[name]]}  # fmt: skip
    results["write_ratio"] = round(median["write_parquet"] / median["write_millrace"], 3)
    results["read_ratio"] = round(median["read_parquet"] / median["read_millrace"], 3)
    #: Spark's hand-off alone, against Parquet's whole write
    results["dropped_over_parquet"] = round(median["write_dropped"] / median["write_parquet"], 3)
    print(json.dumps(results, indent=1))
    for what in ("write", "read"):
        ratio = results[f"{what}_ratio"]
        verdict = "met" if ratio >= 0.5 else "NOT met"
        print(f"{what}: Millrace at {ratio:.2f} of Parquet's rate (target 0.5): {verdict}")
    print(
        f"Spark's hand-off to a Python data source alone took {median['write_dropped']:.2f} s,"
        f" {results['dropped_over_parquet']:.2f} of Parquet's whole write"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


def main() -> None:
    args, settings = _arguments()
    results: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores,"
        f" Python {platform.python_version()}",
        "events": args.events, "size": args.size, "keys": args.keys, "segments": args.segments,
        "spark_conf": settings,
    }  # fmt: skip
    steps: dict[str, list[float]] = {name: [] for name in STEPS}
    with tempfile.TemporaryDirectory(prefix="millrace-spark-bench-") as scratch:
        work = Path(scratch)
        with standalone_node(work) as (base, token, _wire):
            spark = _session(settings)
            rest_call(base, token, "POST", "/v1/scopes", {"scopeName": "bench"})
            frame = _events(spark, args)
            options = {"controller": base, "token": token, "scope": "bench", "stream": "ingest",
                       "default_num_segments": str(args.segments)}  # fmt: skip
            _warm_up(spark, frame, work, options, args.events)
            print(f"{args.events:,} events of {args.size} B, {args.keys} keys", flush=True)
            for n in range(1, args.trials + 1):
                print(f"trial {n} of {args.trials}", flush=True)
                stream = {**options, "stream": f"ingest-{n}"}
                _trial(spark, frame, work / f"parquet-{n}", stream, steps, args.events)
            spark.stop()
    _report(results, steps, args)


if __name__ == "__main__":
    main()
