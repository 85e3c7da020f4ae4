"""Load files (Parquet, CSV, JSON) into a Millrace stream, exactly once.

    spark-submit spark_bridge/jobs/ingest.py --controller http://host:9091 --token-file TOKEN \\
        --stream demo/orders --format parquet --key-column customer data/*.parquet

Each row becomes one event: the ``--event-column`` (string or binary), or, without one, the
whole row as JSON; ``--key-column`` gives its routing key. With ``--typed``, each row is
encoded with the stream's value subject's Avro schema in Confluent's wire format (CSV and JSON
lines are parsed with the schema's types: ISO dates and timestamps become dates and
timestamps); ``--register`` registers the input's own schema under the subject first. The
write is one Spark job whose tasks each write a transaction that the driver commits at the
end, so a failed or retried ingest never leaves part of the files in the stream.
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

FORMATS = ("parquet", "csv", "json")


def ingest(
    spark: Any,
    paths: list[str],
    options: dict[str, str],
    *,
    fmt: str = "parquet",
    key_column: str | None = None,
    event_column: str | None = None,
    show_progress: bool = True,
    typed: str = "",
) -> Summary:
    """Write the rows of ``paths`` to the stream of ``options`` (the data source's);
    ``typed``: '' (events as they are), ``schema`` (encoded with the stream's subject's
    schema) or ``register`` (the input's schema registered first)."""
    from pyspark.sql import functions as f

    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true")
    if typed:
        return _typed(spark, reader, paths, options, fmt, key_column, typed, show_progress)
    frame = reader.load(paths)
    for name, column in (("--key-column", key_column), ("--event-column", event_column)):
        if column is not None and column not in frame.columns:
            raise ValueError(f"{name} {column!r} is not a column of the input: {frame.columns}")
    event = (
        f.col(event_column).cast("string")
        if event_column and dict(frame.dtypes)[event_column] != "binary"
        else f.col(event_column)
        if event_column
        else f.to_json(f.struct(*frame.columns))
    )
    key = f.col(key_column).cast("string") if key_column else f.lit(None).cast("string")
    rows = frame.select(event.alias("event"), key.alias("routing_key")).persist()
    clock = Clock()
    try:
        totals = rows.agg(f.count("*").alias("n"), f.sum(f.length("event")).alias("b")).first()
        with progress(spark, "ingest", show_progress):
            rows.write.format("millrace").options(**options).mode("append").save()
    finally:
        rows.unpersist()
    return Summary(int(totals["n"]), int(totals["b"] or 0), clock.seconds())


def _typed(
    spark: Any, reader: Any, paths: list[str], options: dict[str, str], fmt: str,
    key_column: str | None, typed: str, show_progress: bool,
) -> Summary:  # fmt: skip
    """A typed ingest: the rows' columns are the record's fields."""
    from pyspark.sql import functions as f

    options = {**options, "schema": "registry"}
    if typed == "register":
        options["auto_register_schemas"] = "true"
        frame = reader.load(paths)
    else:
        if fmt != "parquet":  # text: parsed as the schema's types
            record = spark.read.format("millrace").options(**options).load().schema["value"]
            reader = reader.schema(record.dataType)
        frame = reader.load(paths)
    if key_column is not None:
        if key_column not in frame.columns:
            raise ValueError(
                f"--key-column {key_column!r} is not a column of the input: {frame.columns}"
            )
        frame = frame.withColumn("routing_key", f.col(key_column).cast("string"))
    rows = frame.persist()
    clock = Clock()
    try:
        events = rows.count()
        with progress(spark, "ingest", show_progress):
            rows.write.format("millrace").options(**options).mode("append").save()
    finally:
        rows.unpersist()
    return Summary(events, None, clock.seconds())


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The job's own arguments (``millrace ingest`` declares its with this too)."""
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--stream", required=True, metavar="SCOPE/STREAM")
    p.add_argument("--format", default="parquet", choices=FORMATS)
    p.add_argument("--key-column", help="the routing key's column")
    p.add_argument("--event-column", help="the event's column (default: the row as JSON)")
    p.add_argument("--create", action="store_true", help="create the scope and stream")
    p.add_argument("--segments", type=int, default=1, help="a created stream's segments")
    p.add_argument(
        "--typed", action="store_true",
        help="encode each row with the stream's value subject's Avro schema (Confluent's format)",
    )  # fmt: skip
    p.add_argument(
        "--register", action="store_true",
        help="with --typed: register the input's own schema under the subject first",
    )  # fmt: skip


def parser() -> argparse.ArgumentParser:
    return job_parser("ingest", __doc__.splitlines()[0], add_arguments)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.register and not args.typed:
        parser().error("--register goes with --typed")
    options = connection_options(args, "ingest")
    create = str(args.create).lower()
    options |= {"allow_create_scope": create, "allow_create_stream": create,
                "default_num_segments": str(args.segments)}  # fmt: skip
    spark = spark_session("millrace-ingest", args.master)
    try:
        summary = ingest(
            spark, args.paths, options, fmt=args.format, key_column=args.key_column,
            event_column=args.event_column, show_progress=not args.no_progress,
            typed=("register" if args.register else "schema") if args.typed else "",
        )  # fmt: skip
    finally:
        spark.stop()
    print(summary.line(f"ingested into {args.stream}:"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
