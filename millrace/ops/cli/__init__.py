"""The ``millrace`` command: start a node's processes and run administrative commands.

Responsibility: build the parser from the command groups (one module each: ``node`` runs the
node's processes, ``users`` makes credentials, ``scopes``, ``streams``, ``readergroups``, ``kvt``
and ``status`` talk to a running node through the client, ``spark`` runs the Spark jobs), read the
environment into typed settings once (a bad value ends the command with a one-line message and
exit status 2, never a traceback), and hand over to the code that does the work. A command
imports the server's machinery (Django, Celery, the engine) only when it runs, so that
``millrace --help`` is fast and the client's commands work on the base install.

``--data-dir`` and ``--log-level`` set ``MILLRACE_DATA_DIR`` and ``MILLRACE_LOG_LEVEL`` for the
command and everything it starts.

Its other modules:

* ``acl``: ``millrace acl grant|deny|revoke|list|check|join|leave|import``
* ``cluster``: ``millrace cluster status``
* ``kafka``: ``millrace kafka groups``
* ``kvtables``: ``millrace kvt create|list|info|delete|get|put|remove|scan``
* ``observe``: ``millrace scrape-config`` and ``millrace doctor``
* ``remote``: what the client's commands share
* ``schemas``: ``millrace schema register|list|show|check|delete|config``
* ``tls``: ``millrace tls dev-cert``
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from millrace.kernel.config import ConfigError
from millrace.ops.cli import (
    acl,
    cluster,
    kafka,
    kvtables,
    node,
    observe,
    readergroups,
    schemas,
    scopes,
    spark,
    status,
    streams,
    tls,
    users,
)
from millrace.ops.cli.base import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    command,
    millrace_version,
    parents,
)

__all__ = ["CommandError", "build_parser", "main"]

#: The command groups, in the order ``millrace --help`` lists them.
GROUPS: tuple[Any, ...] = (
    node, users, acl, tls, status, observe, cluster, scopes, streams, readergroups, kvtables,
    schemas, kafka, spark,
)  # fmt: skip


def run_version(args: argparse.Namespace, rest: list[str]) -> int:
    print(f"millrace {millrace_version()} (Python {sys.version.split()[0]})")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    shared = parents()
    parser = argparse.ArgumentParser(
        prog="millrace",
        description="Millrace: durable, elastic, ordered event streams (a Pravega-like service).",
        epilog="Each command's --help lists the environment variables it reads.",
        parents=[shared.data_dir],
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"millrace {millrace_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in GROUPS:
        group.register(commands, shared)
    command(commands, "version", run_version, "Print the version of Millrace.")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``millrace`` console script; returns the exit status."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not args.passthrough:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if hasattr(args, "data_dir"):
        os.environ["MILLRACE_DATA_DIR"] = str(Path(args.data_dir).expanduser().absolute())
    if hasattr(args, "log_level"):
        os.environ["MILLRACE_LOG_LEVEL"] = args.log_level
    try:
        return int(args.handler(args, rest))
    except ConfigError as exc:
        print(f"millrace: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CommandError as exc:
        name = " ".join(filter(None, (args.command, getattr(args, "verb", None))))
        print(f"millrace {name}: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # (`millrace ... | head`: the reader had enough; no traceback)
        # What is left in stdout's buffer goes nowhere, not into an error at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
