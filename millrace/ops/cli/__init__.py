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
import dataclasses
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from typing import Any

from controller_app.roles import ROLES
from millrace.kernel.config import ConfigError, SegmentStoreSettings
from millrace.ops.cli.admin import AdminError

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: The longest WebSocket handshake request line the controller reads (and answers).
WEBSOCKET_REQUEST_LINE_BYTES_MAX = 1024 * 1024

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
    if args.segmentstore_port is not None:
        store = dataclasses.replace(store, port=args.segmentstore_port)
    _setup_django()
    from django.conf import settings

    from millrace.ops import standalone

    database = settings.DATABASES["default"]
    print(f"millrace standalone {millrace_version()}: data directory {store.data_dir}")
    print(f"  metadata database: {database['ENGINE'].rsplit('.', 1)[-1]} {database['NAME']}")
    print(f"  broker: {settings.CELERY_BROKER_URL.split('://')[0]}; migrating the database…")
    _migrate(verbosity=0)
    auth = "on" if store.auth_enabled else "off"
    print(
        f"  segment store: {store.host}:{store.port}, {store.container_count} containers, "
        f"tier-1 {store.tier1!r}, tier-2 {store.tier2!r}, auth {auth}",
        flush=True,
    )
    try:
        return standalone.run(
            data_dir=store.data_dir,
            store=store,
            http_host=args.host,
            http_port=args.http_port,
            worker_concurrency=args.worker_concurrency,
        )
    except standalone.StandaloneError as exc:
        raise CommandError(str(exc)) from exc


def cmd_controller(args: argparse.Namespace, rest: list[str]) -> int:
    """The ASGI app (REST API, console, WebSockets) under uvicorn."""
    # The websockets library (uvicorn's WebSocket protocol) drops a handshake whose request
    # line is over 8 KiB without a word; at 1 MiB the tail consumer gets it and answers why
    # it is refused (a query string over its limit). Read when websockets is imported.
    os.environ.setdefault("WEBSOCKETS_MAX_LINE_LENGTH", str(WEBSOCKET_REQUEST_LINE_BYTES_MAX))
    _setup_django()
    import gc

    import uvicorn

    import millrace.project.asgi  # noqa: F401 - loaded now, so that gc.freeze() below covers it

    # Everything loaded so far lives as long as the process: keep it out of the collector's
    # full passes (shorter pauses under load, e.g. the WebSocket tail reads' latency).
    gc.collect()
    gc.freeze()
    uvicorn.run(
        "millrace.project.asgi:application",
        host=args.host,
        port=args.http_port,
        log_level="info",
        log_config=_uvicorn_log_config(),
        lifespan="off",
        proxy_headers=False,
    )
    return EXIT_OK


class QuietProbes(logging.Filter):
    """Health probes answered OK are logged at DEBUG, not INFO: the supervisor asks
    ``/health/liveness`` every second, which filled the node's output with one line a second."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        probe = len(args) >= 5 and str(args[2]).startswith(("/health", "/v1/health"))
        if probe and isinstance(args[4], int) and args[4] < 400:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own logging, with ``QuietProbes`` on its access log."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["quiet_probes"] = {"()": QuietProbes}
    config["loggers"]["uvicorn.access"]["filters"] = ["quiet_probes"]
    return config


def _celery(command: str, extra: list[str]) -> int:
    _setup_django()
    from millrace.project.celery import app

    try:
        app.start([command, *extra])
    except SystemExit as exc:  # celery exits through sys.exit
        return int(exc.code or 0)
    return EXIT_OK


def cmd_worker(args: argparse.Namespace, rest: list[str]) -> int:
    """A Celery worker running the controller's workflows (all of Millrace's queues)."""
    from millrace.project.celery import worker_arguments

    return _celery("worker", worker_arguments(args.concurrency) + rest)


def cmd_beat(args: argparse.Namespace, rest: list[str]) -> int:
    """Celery beat: sends the periodic jobs (transaction timeouts, cleanup, the sweeper,
    retention and watermark rounds)."""
    _setup_django()
    from django.conf import settings

    schedule = str(settings.CELERY_BEAT_SCHEDULE_FILENAME)
    return _celery("beat", ["--loglevel", "INFO", "--schedule", schedule, *rest])


def cmd_token_create(args: argparse.Namespace, rest: list[str]) -> int:
    _setup_django()
    _migrate(verbosity=0)
    from controller_app.users import create_user_token

    print(
        create_user_token(args.user, superuser=args.superuser, rotate=args.rotate, role=args.role)
    )
    return EXIT_OK


def cmd_user_create(args: argparse.Namespace, rest: list[str]) -> int:
    """A new user with a role: its console password, then its API token alone on the last line."""
    _setup_django()
    _migrate(verbosity=0)
    from controller_app.users import create_user

    try:
        password, token = create_user(args.name, args.role)
    except ValueError as exc:
        print(f"millrace user create: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"user {args.name} ({args.role}); console password: {password}")
    print(token)
    return EXIT_OK


def cmd_mint_token(args: argparse.Namespace, rest: list[str]) -> int:
    auth = _lazy_import("segment_app.server.auth", "token minting")
    return _delegate(auth, "main_mint_token", rest)


# -- helpers -------------------------------------------------------------------------------


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.project.settings")
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


def _no_handler(args: argparse.Namespace, rest: list[str]) -> int:
    raise CommandError("choose an action", EXIT_USAGE)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"port {port} is not between 1 and 65535")
    return port


def _http_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface the HTTP server listens on (127.0.0.1)"
    )
    parser.add_argument(
        "--http-port", type=_port, default=9091, metavar="PORT",
        help="HTTP port of REST, console and WebSockets (default 9091, Pravega's REST port)",
    )  # fmt: skip


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
    standalone = _add(
        commands,
        "standalone",
        cmd_standalone,
        "Run a whole node on embedded defaults: segment store, controller (REST, console, "
        "WebSockets), Celery worker and beat.",
        parents=[data_dir],
    )
    _http_options(standalone)
    standalone.add_argument(
        "--segmentstore-port",
        type=_port,
        default=None,
        metavar="PORT",
        help="wire protocol port (default $MILLRACE_SEGMENTSTORE_PORT or 12345)",
    )
    standalone.add_argument(
        "--worker-concurrency",
        type=int,
        default=2,
        metavar="N",
        help="worker processes of the Celery worker (default 2)",
    )
    controller = _add(
        commands,
        "controller",
        cmd_controller,
        "Run the controller's ASGI app (REST API, console, WebSockets) under uvicorn.",
        parents=[data_dir],
    )
    _http_options(controller)
    worker = _add(
        commands,
        "worker",
        cmd_worker,
        "Run a Celery worker for the controller's workflows.",
        passthrough="celery worker",
        parents=[data_dir],
    )
    worker.add_argument("--concurrency", type=int, default=2, metavar="N")
    _add(
        commands,
        "beat",
        cmd_beat,
        "Run Celery beat (the periodic jobs). Run exactly one per cluster.",
        passthrough="celery beat",
        parents=[data_dir],
    )
    token = _add(commands, "token", _no_handler, "Manage REST API tokens.", parents=[data_dir])
    token_commands = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    create = _add(
        token_commands,
        "create",
        cmd_token_create,
        "Print the API token of USER, creating the user (without a password) if needed.",
        parents=[data_dir],
    )
    create.add_argument("user", metavar="USER")
    create.add_argument("--superuser", action="store_true", help="a new user is an administrator")
    create.add_argument("--rotate", action="store_true", help="replace the user's token")
    create.add_argument(
        "--role", choices=ROLES, default="operator", help="a new user's role (default operator)"
    )
    user = _add(commands, "user", _no_handler, "Manage users and their roles.", parents=[data_dir])
    user_commands = user.add_subparsers(dest="user_command", metavar="ACTION", required=True)
    user_create = _add(
        user_commands,
        "create",
        cmd_user_create,
        "Make a user with a role; print its console password, then its API token (last line).",
        parents=[data_dir],
    )
    user_create.add_argument("name", metavar="NAME")
    user_create.add_argument("--role", choices=ROLES, required=True, help="what the user may do")
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
    from millrace.ops.cli import admin as admin_cli

    admin_cli.add_commands(commands, _add, data_dir)
    admin_cli.add_spark_commands(commands, _add, data_dir)
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
    except AdminError as exc:
        command = " ".join(filter(None, (args.command, getattr(args, "verb", None))))
        print(f"millrace {command}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
