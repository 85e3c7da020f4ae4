"""The commands that make credentials: ``user create|list|role|password|disable|enable|delete``,
``token create|list|rotate|revoke``,
``token secret show|rotate`` and ``mint-token``.

``user create`` and the API token commands write the metadata database (the server extra);
``token secret`` reads and rotates the delegation-token secrets (``TokenKeys``: the keyring
file) and ``mint-token`` signs a segment store delegation token with the signing one, which
need only the kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from typing import Any

from millrace.kernel.claims import ACCESS_LEVELS, READ, ROLES, TokenKeys, mint_token
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
_KEY_VARIABLES = (
    "MILLRACE_DATA_DIR",
    "MILLRACE_TOKEN_SECRET",
    "MILLRACE_TOKEN_KEYRING_FILE",
    "MILLRACE_TOKEN_TTL_SECONDS",
)
_KEYS = [v for v in _WEB if v.name in _KEY_VARIABLES]


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
    listing = command(
        actions, "list", run_token_list,
        "List the API tokens: user, role, made, expires (MILLRACE_API_TOKEN_TTL_DAYS), key prefix.",
        variables=_WEB, parents=[parents.data_dir],
    )  # fmt: skip
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    for name, summary in (
        ("rotate", "Replace USER's API token (the old one stops working at once); print it."),
        ("revoke", "Delete USER's API token: it stops working at once."),
    ):
        action = command(
            actions, name, run_token_change, summary, variables=_WEB, parents=[parents.data_dir]
        )
        action.add_argument("user", metavar="USER")
    secret = command(
        actions, "secret", None,
        "Show or rotate the secret that signs delegation tokens (wire protocol, metrics).",
        parents=[parents.data_dir],
    )  # fmt: skip
    secret_actions = secret.add_subparsers(dest="secret_command", metavar="ACTION", required=True)
    show = command(
        secret_actions, "show", run_secret_show,
        "The signing secret's and the retiring secrets' fingerprints, with their end.",
        variables=_KEYS, parents=[parents.data_dir],
    )  # fmt: skip
    show.add_argument("--json", action="store_true", help="machine-readable output")
    rotate = command(
        secret_actions, "rotate", run_secret_rotate,
        "Make a new signing secret; the old one verifies for --overlap more seconds (every "
        "process re-reads the keyring file within a second).",
        variables=_KEYS, parents=[parents.data_dir],
    )  # fmt: skip
    rotate.add_argument(
        "--overlap", type=float, metavar="SECONDS",
        help="how long the old secret still verifies (default: twice MILLRACE_TOKEN_TTL_SECONDS;"
        " at least one token lifetime, or tokens signed just before fail)",
    )  # fmt: skip
    _register_users(commands, parents)
    mint = command(
        commands, "mint-token", run_mint_token,
        "Print a segment store delegation token signed with the token secret.",
        variables=[v for v in variables(SegmentStoreSettings)
                   if v.name in ("MILLRACE_DATA_DIR", "MILLRACE_TOKEN_SECRET",
                                 "MILLRACE_TOKEN_KEYRING_FILE")],
        parents=[parents.data_dir],
    )  # fmt: skip
    mint.add_argument("resource", help='segment name, prefix ending in "/", or "*"')
    mint.add_argument("--access", choices=ACCESS_LEVELS, default=READ)
    mint.add_argument("--ttl", type=float, default=3600.0, help="lifetime in seconds")
    mint.add_argument("--secret", help="shared secret (default: $MILLRACE_TOKEN_SECRET)")


def _register_users(commands: Any, parents: Parents) -> None:
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
    user_list = command(
        actions, "list", run_user_list,
        "List the users: role, whether active, made, last console sign-in, API token.",
        variables=_WEB, parents=[parents.data_dir],
    )  # fmt: skip
    user_list.add_argument("--json", action="store_true", help="machine-readable output")
    role = command(
        actions, "role", run_user_change, "Give NAME the role ROLE (only that one).",
        variables=_WEB, parents=[parents.data_dir],
    )  # fmt: skip
    role.add_argument("name", metavar="NAME")
    role.add_argument("role", choices=ROLES, metavar="ROLE", help=" | ".join(ROLES))
    for name, summary in (
        (
            "password",
            "Give NAME a new random console password (printed; the old one stops working).",
        ),
        ("disable", "Refuse NAME's console password and API token at once (nothing is deleted)."),
        ("enable", "Let a disabled user sign in and use its API token again."),
        ("delete", "Delete NAME and its API token."),
    ):
        action = command(
            actions, name, run_user_change, summary, variables=_WEB, parents=[parents.data_dir]
        )
        action.add_argument("name", metavar="NAME")


def metadata_database() -> None:
    """Django set up on the metadata database, its tables current (the server extra)."""
    needs("django", "the metadata database")
    migrate(verbosity=0)


def run_token_create(args: argparse.Namespace, rest: list[str]) -> int:
    metadata_database()
    from controller_app.access.users import create_user_token

    print(
        create_user_token(args.user, superuser=args.superuser, rotate=args.rotate, role=args.role)
    )
    return EXIT_OK


def run_user_create(args: argparse.Namespace, rest: list[str]) -> int:
    """A new user with a role: its console password, then its API token alone on the last line."""
    metadata_database()
    from controller_app.access.users import create_user

    try:
        password, token = create_user(args.name, args.role)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    print(f"user {args.name} ({args.role}); console password: {password}")
    print(token)
    return EXIT_OK


def run_user_list(args: argparse.Namespace, rest: list[str]) -> int:
    metadata_database()
    from controller_app.access.users import users

    found = users()
    if args.json:
        print(json.dumps(found, indent=2))
        return EXIT_OK
    print(f"{'USER':<20} {'ROLE':<9} {'STATE':<9} {'MADE (UTC)':<17} {'SIGNED IN (UTC)':<17} TOKEN")
    for u in found:
        print(f"{u['user']:<20} {u['role'] or '-':<9} {'active' if u['active'] else 'disabled':<9}"
              f" {u['joined']:<17} {u['last_sign_in'] or 'never':<17} "
              f"{'yes' if u['token'] else 'no'}")  # fmt: skip
    return EXIT_OK


def run_user_change(args: argparse.Namespace, rest: list[str]) -> int:
    """``user role|password|disable|enable|delete NAME``."""
    metadata_database()
    from controller_app.access import users

    name, action = args.name, args.user_command
    try:
        if action == "role":
            users.set_role(name, args.role)
            print(f"{name} is {args.role} now")
        elif action == "password":
            print(f"new console password of {name}: {users.new_password(name)}")
        elif action in ("disable", "enable"):
            users.set_active(name, action == "enable")
            print(f"{name} is {action}d")
        else:
            users.delete_user(name)
            print(f"{name} is deleted")
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    return EXIT_OK


def run_token_list(args: argparse.Namespace, rest: list[str]) -> int:
    metadata_database()
    from controller_app.access.users import api_tokens

    tokens = api_tokens()
    if args.json:
        print(json.dumps(tokens, indent=2))
        return EXIT_OK
    for t in tokens:
        print(f"{t['user']:<20} {t['role'] or '-':<9} made {t['created']}  "
              f"expires {t['expires'] or 'never'}  {t['prefix']}…")  # fmt: skip
    return EXIT_OK


def run_token_change(args: argparse.Namespace, rest: list[str]) -> int:
    """``token rotate USER`` (prints the new token) and ``token revoke USER``."""
    metadata_database()
    from controller_app.access.users import revoke_token, rotate_token

    try:
        if args.token_command == "rotate":
            print(rotate_token(args.user))
        else:
            revoke_token(args.user)
            print(f"the API token of {args.user} is revoked")
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    return EXIT_OK


def _keys() -> TokenKeys:
    settings = WebSettings.from_env()
    return TokenKeys(settings.token_secret, settings.token_keyring)


def run_secret_show(args: argparse.Namespace, rest: list[str]) -> int:
    found = _keys().describe()
    if args.json:
        print(json.dumps(found, indent=2))
        return EXIT_OK
    print(f"signing   {found['signing']}  (keyring {found['keyring']})")
    for key in found["retiring"]:
        until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(key["until"]))
        print(f"retiring  {key['fingerprint']}  verifies until {until}")
    if found["error"]:
        print(f"the keyring file does not load: {found['error']}")
    return EXIT_OK


def run_secret_rotate(args: argparse.Namespace, rest: list[str]) -> int:
    keys = _keys()
    overlap = args.overlap
    if overlap is None:
        overlap = 2 * WebSettings.from_env().token_ttl_seconds
    old = keys.describe()["signing"]
    try:
        new = keys.rotate(overlap)
    except (ValueError, OSError) as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    _audit_rotation(old, new, overlap)
    print(f"signing {new} now; {old} verifies for {overlap:g} s more (keyring {keys.keyring})")
    return EXIT_OK


def _audit_rotation(old: str, new: str, overlap: float) -> None:
    """In the audit log, where the metadata database is at hand (a segment store host may
    have none: the rotation stands regardless)."""
    with contextlib.suppress(Exception):
        needs("django", "the audit log")
        migrate(verbosity=0)
        from controller_app.access.users import audit_local

        audit_local("token-secret.rotate", new, f"replaces {old}; overlap {overlap:g} s")


def run_mint_token(args: argparse.Namespace, rest: list[str]) -> int:
    """The secret is ``--secret``, else the keyring's signing one, else
    ``MILLRACE_TOKEN_SECRET``, else the one persisted in the data directory, as the segment
    store node uses."""
    node = SegmentStoreSettings.from_env()
    secret = args.secret or TokenKeys(node.token_secret, node.token_keyring).signing
    try:
        print(mint_token(secret, args.resource, args.access, args.ttl))
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    return EXIT_OK
