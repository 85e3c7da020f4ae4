"""``millrace ingest`` and ``millrace export``: the Spark jobs of ``spark_bridge.jobs`` on a
local Spark, or the ``spark-submit`` line that runs them on a cluster (the spark extra)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from millrace.ops.cli import remote
from millrace.ops.cli.base import EXIT_USAGE, CommandError, Parents, needs
from spark_bridge.jobs import export as export_job
from spark_bridge.jobs import ingest as ingest_job
from spark_bridge.jobs.common import job_argv


def register(commands: Any, parents: Parents) -> None:
    add = remote.command
    data_dir = parents.data_dir
    parents_ = [data_dir, remote.options()]
    ingest = add(commands, "ingest", remote.handler(spark_ingest),
                 "Load Parquet, CSV or JSON files into a stream, exactly once (local Spark).",
                 parents=parents_)  # fmt: skip
    ingest_job.add_arguments(ingest)
    export = add(commands, "export", remote.handler(spark_export),
                 "Write a stream, or the part between two cuts, out as files (local Spark).",
                 parents=parents_)  # fmt: skip
    export_job.add_arguments(export)
    for job in (ingest, export):
        job.add_argument("--master", help="Spark master (default local[*])")
        job.add_argument("--spark-submit", action="store_true",
                             help="print the spark-submit line for a cluster instead")  # fmt: skip


def _job_argv(args: argparse.Namespace, job: Any) -> list[str]:
    """The job's command line: its own arguments as given here (declared once, by the job),
    then the connection's."""
    argv = [*job_argv(job.add_arguments, args), "--controller", remote.url(args),
            "--token", remote.token(args)]  # fmt: skip
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
    _run_job(args, "ingest", _job_argv(args, ingest_job))


def spark_export(args: argparse.Namespace) -> None:
    remote.split(args.stream)
    if not args.overwrite and "://" not in args.to and Path(args.to).exists():
        raise CommandError(f"--to {args.to} exists already: export never writes over files "
                           "unless given --overwrite", EXIT_USAGE)  # fmt: skip
    _run_job(args, "export", _job_argv(args, export_job))
