"""What the jobs share: a Spark session, a progress bar over Spark's tasks, a summary."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


def spark_session(app: str, master: str | None = None) -> Any:
    """The session of a job: ``master`` (default: what spark-submit gave, else ``local[*]``),
    with the ``millrace`` data source registered."""
    from pyspark.sql import SparkSession

    import spark_bridge

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app).config("spark.ui.showConsoleProgress", "false")
    if master:
        builder = builder.master(master)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    spark_bridge.register(session)
    return session


@contextlib.contextmanager
def progress(spark: Any, what: str, enabled: bool = True) -> Iterator[None]:
    """A progress bar of the tasks of the job's running stages, while the block runs."""
    if not enabled:
        yield
        return
    from tqdm import tqdm

    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    bar = tqdm(total=0, desc=what, unit="task", file=sys.stderr)

    def watch() -> None:
        while not stop.wait(0.5):
            done = total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if total:
                bar.total = max(bar.total or 0, total)
                bar.n = done
                bar.refresh()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.n = bar.total or bar.n
        bar.close()


def job_parser(name: str, description: str, add_arguments: Any) -> argparse.ArgumentParser:
    """A job's whole parser: its own arguments (``add_arguments``, which ``millrace ingest``
    and ``export`` declare theirs with too) and the connection's."""
    parser = argparse.ArgumentParser(prog=name, description=description)
    add_arguments(parser)
    add_connection_arguments(parser)
    return parser


def job_argv(add_arguments: Any, args: argparse.Namespace) -> list[str]:
    """The arguments of ``args`` that ``add_arguments`` declares, spelled back as a command
    line (positionals in order, flags that are set, options that differ from their
    default): what ``millrace ingest``/``export`` hand the job."""
    declared = argparse.ArgumentParser(add_help=False)
    add_arguments(declared)
    argv: list[str] = []
    for action in declared._actions:
        value = getattr(args, action.dest)
        if not action.option_strings:
            argv += [str(v) for v in value] if isinstance(value, list) else [str(value)]
        elif isinstance(action, argparse._StoreTrueAction):
            argv += [action.option_strings[0]] if value else []
        elif value is not None and value != action.default:
            argv += [action.option_strings[0], str(value)]
    return argv


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every job takes to reach Millrace and run Spark."""
    parser.add_argument("--controller", required=True, help="Millrace's HTTP URL")
    parser.add_argument("--token", default="", help="API token (or --token-file)")
    parser.add_argument("--token-file", default="")
    parser.add_argument(
        "--ca", default="", metavar="FILE", help="TLS: the CA file of an https:// controller"
    )
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    parser.add_argument("--no-progress", action="store_true")


def connection_options(args: argparse.Namespace, job: str) -> dict[str, str]:
    """The data source's options for the job's stream (``SystemExit`` 2 for a bad one)."""
    scope, _, stream = args.stream.partition("/")
    if not scope or not stream or "/" in stream:
        print(f"{job}: the stream must be SCOPE/STREAM, not {args.stream!r}", file=sys.stderr)
        raise SystemExit(2)
    options = {"controller": args.controller, "scope": scope, "stream": stream}
    if args.token:
        options["token"] = args.token
    elif args.token_file:
        options["token_file"] = args.token_file
    if args.ca:
        options["trust_store"] = args.ca
    return options


@dataclass
class Summary:
    events: int
    #: the events' bytes (None: not counted, as for typed rows)
    bytes: int | None
    seconds: float

    def line(self, verb: str) -> str:
        rate = self.events / self.seconds if self.seconds else 0.0
        if self.bytes is None:
            return f"{verb} {self.events:,} events in {self.seconds:.1f} s: {rate:,.0f} events/s"
        return (
            f"{verb} {self.events:,} events ({self.bytes:,} bytes) in {self.seconds:.1f} s:"
            f" {rate:,.0f} events/s, {self.bytes / max(self.seconds, 1e-9) / 2**20:,.1f} MiB/s"
        )


class Clock:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def seconds(self) -> float:
        return time.monotonic() - self.started
