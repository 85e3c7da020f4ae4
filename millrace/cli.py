"""The ``millrace`` command: start a node's processes and run administrative commands.

Responsibility: parse arguments, turn the environment into typed configuration once (a bad value
ends the command with a one-line message and exit status 2, never a traceback), and hand over to
the code that does the work. That code is imported lazily, inside each command, so that
``millrace --help`` and ``millrace version`` stay fast and need neither Django nor the engine.
``--data-dir`` sets ``MILLRACE_DATA_DIR`` for everything the command starts.

Exit status: 0 success, 1 failure while running, 2 bad usage or configuration, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from typing import Any

from millrace.config import ConfigError, SegmentStoreSettings

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

Handler = Callable[[argparse.Namespace, list[str]], int]


class CommandError(Exception):
    """A command cannot go on; the message is shown as one line, with ``exit_status``."""

    def __init__(self, message: str, exit_status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def millrace_version() -> str:
    try:
        return version("millrace")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown (not installed)"


# -- commands ------------------------------------------------------------------------------


def cmd_version(args: argparse.Namespace, rest: list[str]) -> int:
    print(f"millrace {millrace_version()} (Python {sys.version.split()[0]})")
    return EXIT_OK


def cmd_migrate(args: argparse.Namespace, rest: list[str]) -> int:
    _migrate(args.verbosity)
    return EXIT_OK


def cmd_segmentstore(args: argparse.Namespace, rest: list[str]) -> int:
    node = _lazy_import("segment_app.server.node", "the segment store server")
    return _delegate(node, "main", rest)


def cmd_standalone(args: argparse.Namespace, rest: list[str]) -> int:
    store = SegmentStoreSettings.from_env()  # check the whole configuration before starting
    _setup_django()
    from django.conf import settings

    database = settings.DATABASES["default"]
    print(f"millrace standalone {millrace_version()}: data directory {store.data_dir}")
    print(f"  metadata database: {database['ENGINE'].rsplit('.', 1)[-1]} {database['NAME']}")
    print(f"  broker: {settings.CELERY_BROKER_URL.split('://')[0]}; migrating the database…")
    _migrate(verbosity=0)
    auth = "on" if store.auth_enabled else "off"
    print(
        f"  segment store: {store.host}:{store.port}, {store.container_count} containers, "
        f"tier-1 {store.tier1!r}, tier-2 {store.tier2!r}, auth {auth}"
    )
    print("  not started yet (planned): ASGI app (REST, console, WebSockets), Celery worker, beat")
    sys.stdout.flush()
    return cmd_segmentstore(args, rest)


def cmd_mint_token(args: argparse.Namespace, rest: list[str]) -> int:
    auth = _lazy_import("segment_app.server.auth", "token minting")
    return _delegate(auth, "main_mint_token", rest)


# -- helpers -------------------------------------------------------------------------------


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.settings")
    import django

    django.setup()  # imports the settings: a bad variable raises ConfigError here


def _migrate(verbosity: int) -> None:
    _setup_django()
    from django.core.management import call_command
    from django.db import DatabaseError

    try:
        call_command("migrate", interactive=False, verbosity=verbosity)
    except DatabaseError as exc:
        detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise CommandError(f"the metadata database failed: {detail}") from exc


def _lazy_import(module: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module.startswith(exc.name):
            raise  # the module exists but one of its own imports is broken: a bug, show it
        raise CommandError(f"{what} is not available in this build ({module} is missing)") from exc


def _delegate(module: ModuleType, function: str, rest: list[str]) -> int:
    entry: Callable[[list[str]], Any] | None = getattr(module, function, None)
    if entry is None:
        raise CommandError(f"{module.__name__}.{function} does not exist")
    status = entry(rest)
    return EXIT_OK if status is None else int(status)


# -- parser --------------------------------------------------------------------------------


def _data_dir_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parent.add_argument(
        "--data-dir",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="root of all local state (sets MILLRACE_DATA_DIR; default ./data)",
    )
    return parent


def _add(
    commands: Any, name: str, handler: Handler, summary: str, *, passthrough: str = "", **kw: Any
) -> argparse.ArgumentParser:
    """Add a subcommand; ``passthrough`` names who receives arguments this parser does not know."""
    description = summary + (f" Other arguments go to {passthrough}." if passthrough else "")
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=summary, description=description, allow_abbrev=False, **kw
    )
    parser.set_defaults(handler=handler, passthrough=bool(passthrough))
    return parser


def build_parser() -> argparse.ArgumentParser:
    data_dir = _data_dir_parent()
    parser = argparse.ArgumentParser(
        prog="millrace",
        description="Millrace: durable, elastic, ordered event streams (a Pravega-like service).",
        epilog="Configuration comes from environment variables (see README.md).",
        parents=[data_dir],
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"millrace {millrace_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add(
        commands,
        "standalone",
        cmd_standalone,
        "Migrate the metadata database, then run a segment store on embedded defaults.",
        passthrough="the segment store (see: millrace segmentstore --help)",
        parents=[data_dir],
    )
    _add(
        commands,
        "segmentstore",
        cmd_segmentstore,
        "Run a segment store node (the wire-protocol server and its containers).",
        passthrough="the segment store",
        add_help=False,
    )
    _add(
        commands,
        "mint-token",
        cmd_mint_token,
        "Print a delegation token signed with the token secret.",
        passthrough="the token minter",
        add_help=False,
    )
    migrate = _add(
        commands,
        "migrate",
        cmd_migrate,
        "Create or update the metadata database's tables.",
        parents=[data_dir],
    )
    migrate.add_argument("-v", "--verbosity", type=int, choices=range(4), default=1)
    _add(commands, "version", cmd_version, "Print the version of Millrace.")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``millrace`` console script; returns the exit status."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not args.passthrough:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if hasattr(args, "data_dir"):
        os.environ["MILLRACE_DATA_DIR"] = str(Path(args.data_dir).expanduser().absolute())
    try:
        return int(args.handler(args, rest))
    except ConfigError as exc:
        print(f"millrace: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CommandError as exc:
        print(f"millrace {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
