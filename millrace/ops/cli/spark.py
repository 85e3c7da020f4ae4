"""``millrace ingest`` and ``millrace export``: the Spark jobs of ``spark_bridge.jobs`` on a
local Spark, or the ``spark-submit`` line that runs them on a cluster (the spark extra)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from millrace.ops.cli import remote
from millrace.ops.cli.base import EXIT_USAGE, CommandError, Parents, needs


def register(commands: Any, parents: Parents) -> None:
    add = remote.command
    data_dir = parents.data_dir
    parents_ = [data_dir, remote.options()]
    ingest = add(commands, "ingest", remote.handler(spark_ingest),
                 "Load Parquet, CSV or JSON files into a stream, exactly once (local Spark).",
                 parents=parents_)  # fmt: skip
    ingest.add_argument("paths", nargs="+", metavar="PATH")
    ingest.add_argument("--stream", required=True, metavar="SCOPE/STREAM")
    ingest.add_argument("--format", default="parquet", choices=("parquet", "csv", "json"))
    ingest.add_argument("--key-column", help="the routing key's column")
    ingest.add_argument("--event-column", help="the event's column (default: the row as JSON)")
    ingest.add_argument("--create", action="store_true", help="create the scope and stream")
    ingest.add_argument("--segments", type=int, default=1, help="a created stream's segments")
    export = add(commands, "export", remote.handler(spark_export),
                 "Write a stream, or the part between two cuts, out as files (local Spark).",
                 parents=parents_)  # fmt: skip
    export.add_argument("name", metavar="SCOPE/STREAM")
    export.add_argument("--to", required=True, metavar="DIR")
    export.add_argument("--from", dest="start", default="earliest", help="a stream cut text")
    export.add_argument("--until", dest="end", default="unbounded", help="a stream cut text")
    export.add_argument("--format", default="parquet", choices=("parquet", "json", "csv"))
    export.add_argument(
        "--overwrite", action="store_true",
        help="replace what --to holds (without it an existing --to is refused)",
    )  # fmt: skip
    for job in (ingest, export):
        job.add_argument("--master", help="Spark master (default local[*])")
        job.add_argument("--spark-submit", action="store_true",
                             help="print the spark-submit line for a cluster instead")  # fmt: skip


def _job_argv(args: argparse.Namespace, *rest: str) -> list[str]:
    argv = ["--controller", remote.url(args), *rest]
    if remote.ca(args):
        argv += ["--ca", str(remote.ca(args))]
    if args.master:
        argv += ["--master", args.master]
    return argv


def _run_job(args: argparse.Namespace, module: str, argv: list[str]) -> None:
    job = needs(f"spark_bridge.jobs.{module}", f"the {module} job", extra="spark")
    needs("pyspark", f"the {module} job", extra="spark")  # (the job imports it as it runs)
    needs("pyarrow", f"the {module} job", extra="spark")
    if args.spark_submit:  # the cluster's Python needs Millrace installed, as here
        path = Path(job.__file__ or module)
        shown = [a if a != remote.token(args) else "TOKEN" for a in argv]
        line = shlex.join(["spark-submit", str(path), *shown])
        print(line.replace(" TOKEN", ' "$MILLRACE_TOKEN"'))
        return
    code = job.main(argv)
    if code:
        raise CommandError(f"the {module} job failed (exit status {code})")


def spark_ingest(args: argparse.Namespace) -> None:
    remote.split(args.stream)
    rest = ["--token", remote.token(args), "--stream", args.stream, "--format", args.format,
            "--segments", str(args.segments)]  # fmt: skip
    if args.key_column:
        rest += ["--key-column", args.key_column]
    if args.event_column:
        rest += ["--event-column", args.event_column]
    if args.create:
        rest.append("--create")
    _run_job(args, "ingest", _job_argv(args, *rest, *args.paths))


def spark_export(args: argparse.Namespace) -> None:
    remote.split(args.name)
    if not args.overwrite and "://" not in args.to and Path(args.to).exists():
        raise CommandError(f"--to {args.to} exists already: export never writes over files "
                           "unless given --overwrite", EXIT_USAGE)  # fmt: skip
    rest = ["--token", remote.token(args), "--stream", args.name, "--to", args.to,
            "--from", args.start, "--until", args.end, "--format", args.format]  # fmt: skip
    if args.overwrite:
        rest.append("--overwrite")
    _run_job(args, "export", _job_argv(args, *rest))
