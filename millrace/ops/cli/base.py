"""What every command of the ``millrace`` command line is built with.

A command group module (``node``, ``users``, ``scopes`` …) has a ``register(commands, parents)``
that adds its commands with ``command``: each gets a summary, a handler ``(args, rest) -> exit
status``, and the environment variables it reads, listed at the end of its ``--help`` from
their declarations (``millrace.kernel.config``), so that help and code cannot disagree.

Exit status: 0 success, 1 failure while running, 2 bad usage or configuration, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from millrace.kernel.config import Variable

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

Handler = Callable[[argparse.Namespace, list[str]], int]


class CommandError(Exception):
    """A command cannot go on; the message is shown as one line, with ``exit_status``."""

    def __init__(self, message: str, exit_status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_status = exit_status


@dataclass(frozen=True)
class Parents:
    """Options several commands share, as argparse parent parsers."""

    #: ``--data-dir`` (sets ``MILLRACE_DATA_DIR`` for the command and what it starts).
    data_dir: argparse.ArgumentParser
    #: ``--log-level`` (sets ``MILLRACE_LOG_LEVEL``), for the commands that run a process.
    log_level: argparse.ArgumentParser


def millrace_version() -> str:
    try:
        return version("millrace")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown (not installed)"


def environment_help(variables: Iterable[Variable]) -> str:
    """The ``--help`` epilog naming each variable, its default and its meaning."""
    lines = ["environment variables:"]
    for variable in variables:
        default = f" (default: {variable.default_text})" if variable.default_text else ""
        lines.append(f"  {variable.name}{default}\n      {variable.help}")
    return "\n".join(lines)


def command(
    commands: Any,
    name: str,
    handler: Handler | None,
    summary: str,
    *,
    passthrough: str = "",
    variables: Iterable[Variable] = (),
    **kw: Any,
) -> argparse.ArgumentParser:
    """Add the subcommand ``name``; ``passthrough`` names who receives arguments it does not
    know, ``variables`` the environment it reads (listed by its ``--help``)."""
    description = summary + (f" Other arguments go to {passthrough}." if passthrough else "")
    variables = list(variables)
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog=environment_help(variables) if variables else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
        **kw,
    )
    parser.set_defaults(handler=handler or _choose_an_action, passthrough=bool(passthrough))
    return parser


def _choose_an_action(args: argparse.Namespace, rest: list[str]) -> int:
    raise CommandError("choose an action", EXIT_USAGE)


def port(text: str) -> int:
    """An argparse type: a TCP port number."""
    number = any_port(text)
    if number == 0:
        raise argparse.ArgumentTypeError("port 0 is not between 1 and 65535")
    return number


def any_port(text: str) -> int:
    """An argparse type: a TCP port number, or 0 for any free port."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= number < 65536:
        raise argparse.ArgumentTypeError(f"port {number} is not between 1 and 65535")
    return number


def needs(module: str, what: str, extra: str = "server") -> Any:
    """``module``, imported now; when it (or a library it needs) is not installed, a
    ``CommandError`` saying which extra brings it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise CommandError(
            f"{what} is not installed here ({exc.name} is missing): pip install 'millrace[{extra}]'"
        ) from exc


def parents() -> Parents:
    data_dir = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    data_dir.add_argument(
        "--data-dir",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="root of all local state (sets MILLRACE_DATA_DIR; default ./data)",
    )
    log_level = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    log_level.add_argument(
        "--log-level",
        metavar="LEVEL",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default=argparse.SUPPRESS,
        help="DEBUG, INFO, WARNING or ERROR (sets MILLRACE_LOG_LEVEL; default INFO)",
    )
    return Parents(data_dir, log_level)


def setup_django() -> None:
    """Django, set up from ``millrace.project.settings`` (a bad variable raises ConfigError)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.project.settings")
    import django  # the server extra: imported when a server command runs, never for --help

    django.setup()


def migrate(verbosity: int) -> None:
    """Create or update the metadata database's tables (a PostgreSQL database that does not
    exist yet is created first); a database that fails ends the command with its message."""
    setup_django()
    from django.core.management import call_command
    from django.db import DatabaseError

    try:
        _create_missing_database()
        with _unsynced_sqlite():
            call_command("migrate", interactive=False, verbosity=verbosity)
    except DatabaseError as exc:
        detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise CommandError(f"the metadata database failed: {detail}") from exc


@contextlib.contextmanager
def _unsynced_sqlite() -> Iterator[None]:
    """On SQLite, the migrations' commits are not each synced to disk (``synchronous=NORMAL``
    for this connection: in WAL mode a power loss may roll back the last commits, never
    corrupt the file), and the whole is synced once at the end (a checkpoint). Each migration
    records itself in the transaction that applies it, so one rolled back is applied again by
    the next ``migrate``. A fresh database has 50-odd migrations: that many syncs, each one
    a wait where the disk syncs slowly. Elsewhere: nothing changes."""
    from django.db import connection

    if connection.vendor != "sqlite":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous=NORMAL")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            cursor.execute("PRAGMA synchronous=FULL")


def _create_missing_database() -> None:
    """``CREATE DATABASE`` for a PostgreSQL ``DATABASE_URL`` naming a database the server does
    not have yet (as a first ``cluster local`` meets it), through the server's ``postgres``
    database; announced on stderr. Anything else is left to the migration's own error."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    import psycopg
    from psycopg import sql

    given = connection.settings_dict
    name = given["NAME"]
    params = {key: given[field] for key, field in
              (("user", "USER"), ("password", "PASSWORD"), ("host", "HOST"), ("port", "PORT"))
              if given[field]}  # fmt: skip
    try:
        psycopg.connect(dbname=name, connect_timeout=10, **params).close()
        return
    except psycopg.OperationalError as exc:
        if f'database "{name}" does not exist' not in str(exc):
            return
    try:
        with psycopg.connect(dbname="postgres", connect_timeout=10, autocommit=True,
                             **params) as server:  # fmt: skip
            server.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        raise CommandError(f"the PostgreSQL database {name!r} does not exist, and creating it "
                           f"failed: {str(exc).strip()}") from None  # fmt: skip
    warn(f"created the PostgreSQL database {name!r}")


def warn(message: str) -> None:
    print(f"millrace: {message}", file=sys.stderr, flush=True)
