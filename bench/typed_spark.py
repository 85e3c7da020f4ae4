"""Typed Spark (``schema=registry``) beside untyped reads and writes of the same events, one run.

Target (issue 46): a typed read of Avro events at least 0.5x the untyped read of the same
events (rows per second, local Spark), and a typed write at least 0.5x the untyped write.

It starts a standalone node (embedded defaults) and a local Spark (``local[2]``), makes a
DataFrame of ``--events`` readings (``id`` bigint, ``sensor`` string, ``at`` timestamp, ``value``
double, ``ok`` boolean; cached), warms both paths up, then ``--trials`` times, in turn:

* **typed write**: the DataFrame with ``schema=registry`` and ``auto_register_schemas`` (its
  schema registered under the new stream's subject), each row encoded as Avro in Confluent's
  wire format, into a new stream;
* **untyped write**: the same events, already encoded (read back once from the first typed
  stream and cached), as an ``event`` binary column, into a new stream;
* **typed read**: the typed stream with ``schema=registry``, summing ``value.value`` (every
  row decoded);
* **untyped read**: the same stream without, summing the events' lengths.

Every write is exactly once (the default). It prints each trial, the medians and the ratios.

Usage::

    .venv/bin/python bench/typed_spark.py                 # 2,000,000 events, 3 trials
    .venv/bin/python bench/typed_spark.py --events 500000 --trials 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.services import standalone_node
from bench.spark_ingest import _session, timed

STEPS = ("write_typed", "write_untyped", "read_typed", "read_untyped")


def _readings(spark: Any, events: int, partitions: int) -> Any:
    from pyspark.sql import functions as f

    frame = spark.range(events, numPartitions=partitions).select(
        f.col("id"),
        f.format_string("s-%04d", f.col("id") % 1000).alias("sensor"),
        f.timestamp_seconds(f.lit(1_790_000_000) + f.col("id")).alias("at"),
        (f.col("id") * 0.5).alias("value"),
        (f.col("id") % 2 == 0).alias("ok"),
        (f.col("id") % 1000).cast("string").alias("routing_key"),
    )
    frame = frame.cache()
    frame.count()
    return frame


def _options(base: str, token: str, stream: str, segments: int, **more: str) -> dict[str, str]:
    return {"controller": base, "token": token, "scope": "bench", "stream": stream,
            "default_num_segments": str(segments), **more}  # fmt: skip


def _trial(spark: Any, frame: Any, encoded: Any, opts: Any, trial: int) -> dict[str, float]:
    """One run of each step: seconds by step (``encoded``: the untyped write's events)."""
    from pyspark.sql import functions as f

    typed_stream, plain_stream = f"typed{trial}", f"plain{trial}"
    typed_write = opts(typed_stream, schema="registry", auto_register_schemas="true")
    typed_read = spark.read.format("millrace").options(**opts(typed_stream, schema="registry"))
    plain_read = spark.read.format("millrace").options(**opts(typed_stream))
    return {
        "write_typed": timed("typed write", lambda: frame.write.format("millrace")
                             .options(**typed_write).mode("append").save()),
        "write_untyped": timed("untyped write", lambda: encoded.write.format("millrace")
                               .options(**opts(plain_stream)).mode("append").save()),
        "read_typed": timed("typed read", lambda: typed_read.load()
                            .select(f.sum("value.value"), f.count("*")).collect()),
        "read_untyped": timed("untyped read", lambda: plain_read.load()
                              .select(f.sum(f.length("event")), f.count("*")).collect()),
    }  # fmt: skip


def _run(base: str, token: str, args: argparse.Namespace) -> dict[str, list[float]]:
    spark = _session({})
    frame = _readings(spark, args.events, args.partitions)

    def opts(stream: str, **more: str) -> dict[str, str]:
        return _options(base, token, stream, args.segments, **more)

    warm = frame.limit(args.events // 10)
    typed = opts("warm", schema="registry", auto_register_schemas="true")
    warm.write.format("millrace").options(**typed).mode("append").save()
    spark.read.format("millrace").options(**opts("warm", schema="registry")).load().count()
    # the same events as the typed write makes, encoded once, for the untyped write
    typed = opts("encoded", schema="registry", auto_register_schemas="true")
    frame.write.format("millrace").options(**typed).mode("append").save()
    encoded = spark.read.format("millrace").options(**opts("encoded")).load().select("event")
    encoded = encoded.repartition(args.partitions).cache()
    encoded.count()
    encoded.write.format("millrace").options(**opts("warm-plain")).mode("append").save()
    steps: dict[str, list[float]] = {name: [] for name in STEPS}
    for trial in range(args.trials):
        print(f"trial {trial + 1}", flush=True)
        for name, seconds in _trial(spark, frame, encoded, opts, trial).items():
            steps[name].append(seconds)
    spark.stop()
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="millrace-typed-") as work,
        standalone_node(Path(work)) as (base, token, _),
    ):
        steps = _run(base, token, args)
    median = {name: statistics.median(times) for name, times in steps.items()}
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "events": args.events,
    }
    for name in STEPS:
        results[name] = {"seconds": round(median[name], 2),
                         "rows_per_s": round(args.events / median[name]),
                         "trials": [round(t, 2) for t in steps[name]]}  # fmt: skip
    results["read_ratio"] = round(median["read_untyped"] / median["read_typed"], 3)
    results["write_ratio"] = round(median["write_untyped"] / median["write_typed"], 3)
    print(json.dumps(results, indent=1))
    for what in ("read", "write"):
        ratio = results[f"{what}_ratio"]
        verdict = "met" if ratio >= 0.5 else "NOT met"
        print(f"typed {what}: {ratio:.2f} of the untyped rate (target 0.5): {verdict}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
