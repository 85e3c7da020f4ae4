"""Write a Millrace stream (or the part between two stream cuts) out as files.

    spark-submit spark_bridge/jobs/export.py demo/orders --controller http://host:9091 \\
        --token-file TOKEN --to /data/orders-export --format parquet [--from CUT] [--until CUT]

Rows: ``event`` (binary), ``scope``, ``stream``, ``segment_id``, ``offset``; per routing key,
sorting by (segment_id, offset) gives the order the events were written in. With ``--typed``,
each event decoded by the stream's value subject's Avro schema (``--version``: one version,
default the latest; older versions' events are resolved to it): the record's fields as
columns of their types, then ``schema_id``, ``segment_id`` and ``offset``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from spark_bridge.jobs.common import (
    Clock,
    Summary,
    connection_options,
    job_parser,
    progress,
    spark_session,
)

FORMATS = ("parquet", "json", "csv")


def export(
    spark: Any,
    options: dict[str, str],
    to: str,
    *,
    fmt: str = "parquet",
    show_progress: bool = True,
    overwrite: bool = False,
    typed: bool = False,
) -> Summary:
    from pyspark.sql import functions as f

    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if typed:
        frame = spark.read.format("millrace").options(**options, schema="registry").load()
        record = frame.schema["value"].dataType
        fields = record.fieldNames() if hasattr(record, "fieldNames") else []
        places = ["schema_id", "segment_id", "offset"]
        flat = fields and not set(fields) & set(places)  # (else the record stays a column)
        frame = frame.select(*(["value.*"] if flat else ["value"]), *places)
    else:
        frame = spark.read.format("millrace").options(**options).load().drop("routing_key")
        if fmt != "parquet":  # text formats: the event as text
            frame = frame.withColumn("event", f.col("event").cast("string"))
    frame = frame.persist()
    clock = Clock()
    try:
        with progress(spark, "export", show_progress):
            frame.write.format(fmt).mode("overwrite" if overwrite else "errorifexists").save(to)
        if typed:
            return Summary(frame.count(), None, clock.seconds())
        totals = frame.agg(f.count("*").alias("n"), f.sum(f.length("event")).alias("b")).first()
    finally:
        frame.unpersist()
    return Summary(int(totals["n"]), int(totals["b"] or 0), clock.seconds())


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The job's own arguments (``millrace export`` declares its with this too)."""
    p.add_argument("stream", metavar="SCOPE/STREAM")
    p.add_argument("--to", required=True, metavar="DIR")
    p.add_argument("--from", dest="start", default="earliest", help="a stream cut (or earliest)")
    p.add_argument("--until", dest="end", default="unbounded", help="a stream cut (or unbounded)")
    p.add_argument("--format", default="parquet", choices=FORMATS)
    p.add_argument(
        "--overwrite", action="store_true",
        help="replace what --to holds (without it an existing --to is refused)",
    )  # fmt: skip
    p.add_argument(
        "--typed", action="store_true",
        help="decode the events by the stream's value subject's Avro schema into typed columns",
    )  # fmt: skip
    p.add_argument(
        "--version", type=int, default=0,
        help="with --typed: the subject's version to read as (default: the latest)",
    )  # fmt: skip


def parser() -> argparse.ArgumentParser:
    return job_parser("export", __doc__.splitlines()[0], add_arguments)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    options = connection_options(args, "export")
    options |= {"start_stream_cut": args.start, "end_stream_cut": args.end}
    if args.version:
        options["schema_version"] = str(args.version)
    spark = spark_session("millrace-export", args.master)
    try:
        summary = export(spark, options, args.to, fmt=args.format,
                         show_progress=not args.no_progress, overwrite=args.overwrite,
                         typed=args.typed)  # fmt: skip
    finally:
        spark.stop()
    print(summary.line(f"exported {args.stream} to {args.to}:"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
