"""What the client's commands share: the node they talk to and its credentials, the Python
client's management calls (``millrace.client.admin``), and their output.

They talk to a running node: ``--url`` (default ``$MILLRACE_URL`` or http://127.0.0.1:9091;
``https://`` for TLS, verified with ``--ca``, default ``$MILLRACE_TLS_CA_FILE`` or the system's
trust store) with ``--token`` (default ``$MILLRACE_TOKEN``, else the standalone administrator's
``<data dir>/admin-token``); ``--json`` prints machine-readable output. They need only the base
install (the client SDK).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from millrace.kernel.config import ClientSettings, variables
from millrace.ops.cli import base
from millrace.ops.cli.base import EXIT_OK, CommandError, Handler

if TYPE_CHECKING:
    from millrace.client.admin import AdminCalls

#: How the commands introduce themselves: the audit log counts their changes as the CLI's.
CLI_AGENT = "millrace-cli"

#: The variables the client's commands read (``--help`` lists them).
VARIABLES = variables(ClientSettings)


def settings() -> ClientSettings:
    return ClientSettings.from_env()


def token(args: argparse.Namespace) -> str:
    return token_and_source(args)[0]


def token_and_source(args: argparse.Namespace) -> tuple[str, str]:
    """The API token of the commands and where it came from (said when it is refused)."""
    if getattr(args, "token", None):
        return str(args.token), "--token"
    found = settings()
    if found.token:
        return found.token, "MILLRACE_TOKEN"
    token_file = found.data_dir / "admin-token"
    if token_file.exists():
        return token_file.read_text().strip(), str(token_file)
    raise CommandError(
        f"no API token: pass --token, set MILLRACE_TOKEN, or run where {token_file} exists"
    )


def url(args: argparse.Namespace) -> str:
    """The controller URL as given: one, or several separated by commas."""
    return str(args.url or settings().url).rstrip("/")


def urls(args: argparse.Namespace) -> list[str]:
    """The controllers of ``url``, each a whole URL (``http://a:9091,b:9091``: the second
    takes the first one's scheme)."""
    from millrace.client.controller import controller_urls

    try:
        return controller_urls(url(args))
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def ca(args: argparse.Namespace) -> str | None:
    """The CA file an ``https://`` node is verified with (``--ca``, else the variable)."""
    return getattr(args, "ca", None) or settings().tls_ca


def verify(args: argparse.Namespace) -> Any:
    """httpx's ``verify`` for the node: its CA when one is given, else the system's."""
    from millrace.kernel.tls import client_context

    return client_context(ca(args))


def ws_tls(args: argparse.Namespace, uri: str) -> Any:
    """The TLS context of a ``wss://`` connection (None for ``ws://``)."""
    from millrace.kernel.tls import client_context

    return client_context(ca(args)) if uri.startswith("wss://") else None


def split(name: str) -> tuple[str, str]:
    """``SCOPE/NAME`` as its two parts."""
    scope, _, stream = name.partition("/")
    if not scope or not stream or "/" in stream:
        raise CommandError(f"expected SCOPE/STREAM, not {name!r}")
    return scope, stream


def admin(
    args: argparse.Namespace, calls: Callable[[AdminCalls], Awaitable[Any]], *,
    exists_ok: bool = False,
) -> Any:  # fmt: skip
    """Make the SDK's management calls ``calls(admin)`` (``millrace.client.admin``) of the
    node: a controller restarting or a service it needs that is away (503) is waited for,
    within the client's patience (``millrace.client.controller.PATIENCE_SECONDS``). With
    ``exists_ok``, a create whose object exists already (409) answers ``None`` (run again, a
    command is not an error)."""
    # (imported when the command runs: ``millrace --help`` and the node's processes skip the SDK)
    import httpx

    from millrace.client.admin import AdminCalls
    from millrace.client.controller import AsyncControllerClient, ControllerError
    from millrace.kernel.tls import TlsRefused

    async def calling() -> Any:
        client = AsyncControllerClient(
            url(args), token(args), timeout=90, user_agent=CLI_AGENT, tls_ca=ca(args)
        )
        try:
            return await calls(AdminCalls(client))
        finally:
            await client.close()

    try:
        return asyncio.run(calling())
    except httpx.HTTPError as exc:
        raise CommandError(f"cannot reach {url(args)}: {exc}") from None
    except TlsRefused as exc:
        raise CommandError(str(exc)) from None
    except ControllerError as exc:
        if exists_ok and exc.status == 409:
            return None
        said = f"{exc.code}: {exc.message}"
        if exc.status == 401:  # (which token: a file rotated from the console, say)
            said += f" (the token from {token_and_source(args)[1]}; --token gives another)"
        raise CommandError(said) from None


def out(args: argparse.Namespace, value: Any, text: str) -> None:
    print(json.dumps(value, indent=2) if args.json else text)


def options() -> argparse.ArgumentParser:
    """``--url``, ``--token`` and ``--json``, as a parent parser."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--url",
        help="the node, or several controllers separated by commas (default $MILLRACE_URL or"
        f" {ClientSettings.url})",
    )
    parent.add_argument(
        "--token", help="API token (default $MILLRACE_TOKEN or <data dir>/admin-token)"
    )
    parent.add_argument(
        "--ca", metavar="FILE",
        help="CA file an https:// node is verified with (default $MILLRACE_TLS_CA_FILE)",
    )  # fmt: skip
    parent.add_argument("--json", action="store_true", help="machine-readable output")
    return parent


def handler(action: Callable[..., None], rest: bool = False) -> Handler:
    """A command handler around ``action(args)``; with ``rest``, ``action(args, rest)`` also
    gets the arguments argparse left over (events placed after an option)."""

    def run(args: argparse.Namespace, left: list[str]) -> int:
        action(args, left) if rest else action(args)
        return EXIT_OK

    return run


def command(*args: Any, **kw: Any) -> argparse.ArgumentParser:
    """``base.command`` for a client's command: its ``--help`` lists ``VARIABLES``."""
    return base.command(*args, variables=VARIABLES, **kw)
