"""The commands that make credentials: ``user create``, ``token create`` and ``mint-token``.

``user create`` and ``token create`` write the metadata database (the server extra);
``mint-token`` signs a segment store delegation token with the token secret, which needs only
the kernel.
"""

from __future__ import annotations

import argparse
from typing import Any

from millrace.kernel.claims import ACCESS_LEVELS, READ, ROLES, mint_token
from millrace.kernel.config import SegmentStoreSettings, WebSettings, variables
from millrace.ops.cli.base import (
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    Parents,
    command,
    migrate,
    needs,
)

_WEB = variables(WebSettings)


def register(commands: Any, parents: Parents) -> None:
    token = command(commands, "token", None, "Manage REST API tokens.", parents=[parents.data_dir])
    actions = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    create = command(
        actions, "create", run_token_create,
        "Print the API token of USER, creating the user (without a password) if needed.",
        variables=_WEB, parents=[parents.data_dir],
    )  # fmt: skip
    create.add_argument("user", metavar="USER")
    create.add_argument("--superuser", action="store_true", help="a new user is an administrator")
    create.add_argument("--rotate", action="store_true", help="replace the user's token")
    create.add_argument(
        "--role", choices=ROLES, default="operator", help="a new user's role (default operator)"
    )
    user = command(
        commands, "user", None, "Manage users and their roles.", parents=[parents.data_dir]
    )
    actions = user.add_subparsers(dest="user_command", metavar="ACTION", required=True)
    user_create = command(
        actions, "create", run_user_create,
        "Make a user with a role; print its console password, then its API token (last line).",
        variables=_WEB, parents=[parents.data_dir],
    )  # fmt: skip
    user_create.add_argument("name", metavar="NAME")
    user_create.add_argument("--role", choices=ROLES, required=True, help="what the user may do")
    mint = command(
        commands, "mint-token", run_mint_token,
        "Print a segment store delegation token signed with the token secret.",
        variables=[v for v in variables(SegmentStoreSettings)
                   if v.name in ("MILLRACE_DATA_DIR", "MILLRACE_TOKEN_SECRET")],
        parents=[parents.data_dir],
    )  # fmt: skip
    mint.add_argument("resource", help='segment name, prefix ending in "/", or "*"')
    mint.add_argument("--access", choices=ACCESS_LEVELS, default=READ)
    mint.add_argument("--ttl", type=float, default=3600.0, help="lifetime in seconds")
    mint.add_argument("--secret", help="shared secret (default: $MILLRACE_TOKEN_SECRET)")


def run_token_create(args: argparse.Namespace, rest: list[str]) -> int:
    needs("django", "the metadata database")
    migrate(verbosity=0)
    from controller_app.users import create_user_token

    print(
        create_user_token(args.user, superuser=args.superuser, rotate=args.rotate, role=args.role)
    )
    return EXIT_OK


def run_user_create(args: argparse.Namespace, rest: list[str]) -> int:
    """A new user with a role: its console password, then its API token alone on the last line."""
    needs("django", "the metadata database")
    migrate(verbosity=0)
    from controller_app.users import create_user

    try:
        password, token = create_user(args.name, args.role)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    print(f"user {args.name} ({args.role}); console password: {password}")
    print(token)
    return EXIT_OK


def run_mint_token(args: argparse.Namespace, rest: list[str]) -> int:
    """The secret is ``--secret``, else ``MILLRACE_TOKEN_SECRET``, else the one persisted in
    the data directory, as the segment store node uses."""
    secret = args.secret or SegmentStoreSettings.from_env().token_secret
    try:
        print(mint_token(secret, args.resource, args.access, args.ttl))
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    return EXIT_OK
