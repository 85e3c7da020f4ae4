"""``millrace scrape-config``: a Prometheus configuration that scrapes every process of a
standalone node or a cluster; ``millrace doctor``: what is wrong with a deployment, one line
each (``controller_app.operations.doctor``).

It mints a delegation token for ``*`` (read only) with the node's token secret, writes it to a
file only its owner may read, and prints a ``scrape_configs`` entry that finds the targets
through the controller's ``GET /v1/metrics/targets`` (Prometheus's ``http_sd_configs``) and
authenticates with that file everywhere. Prometheus reads the file at each scrape, so running
the command again (after a rotation of the token secret, or before the token ends) renews the
credential without a reload.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from millrace.kernel import rest_paths as paths
from millrace.kernel.claims import READ, TokenKeys, mint_token
from millrace.kernel.config import (
    ClientSettings,
    SegmentStoreSettings,
    TlsSettings,
    WebSettings,
    variables,
)
from millrace.ops.cli import remote
from millrace.ops.cli.base import (
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    Parents,
    command,
    needs,
    setup_django,
)

#: The default lifetime of the scrape token, in days.
TOKEN_DAYS = 365


def register(commands: Any, parents: Parents) -> None:
    scrape = command(
        commands, "scrape-config", run_scrape_config,
        "Print a Prometheus scrape configuration for every process of this node or cluster, and"
        " write the read-only token it authenticates with.",
        variables=[
            *(v for v in remote.VARIABLES if v.name == "MILLRACE_URL"),
            *(v for v in variables(SegmentStoreSettings)
              if v.name in ("MILLRACE_TOKEN_SECRET", "MILLRACE_TOKEN_KEYRING_FILE")),
            *(v for v in variables(TlsSettings) if v.name == "MILLRACE_TLS_CA_FILE"),
        ],
        parents=[parents.data_dir],
    )  # fmt: skip
    scrape.add_argument(
        "--url", help=f"a controller of the node or cluster (default $MILLRACE_URL or"
        f" {ClientSettings.url})",
    )  # fmt: skip
    scrape.add_argument(
        "--token-file", type=Path, metavar="FILE",
        help="where the token goes (default <data dir>/prometheus-token)",
    )  # fmt: skip
    scrape.add_argument(
        "--days", type=float, default=TOKEN_DAYS, help=f"the token's lifetime, days ({TOKEN_DAYS})"
    )
    scrape.add_argument("--job", default="millrace", help="the job's name (default millrace)")
    scrape.add_argument(
        "--interval", default="15s", help="scrape interval, Prometheus's syntax (default 15s)"
    )
    scrape.add_argument(
        "--rules", action="append", default=[], metavar="FILE",
        help="alert and recording rule files to list under rule_files (repeatable)",
    )  # fmt: skip
    scrape.add_argument(
        "--ca", metavar="FILE",
        help="CA file https:// ports are verified with (default $MILLRACE_TLS_CA_FILE)",
    )  # fmt: skip
    _register_doctor(commands, parents)


def _register_doctor(commands: Any, parents: Parents) -> None:
    doctor = command(
        commands, "doctor", run_doctor,
        "Check this host and the node or cluster as deployed: clocks, database, broker, tiers,"
        " disk, certificates, token secret, every process's readiness and version, reader"
        " groups; one line each (exit status 0 when all are OK).",
        variables=[*remote.VARIABLES, *variables(WebSettings)], parents=[parents.data_dir],
    )  # fmt: skip
    doctor.add_argument(
        "--url", help=f"a controller of the node or cluster (default $MILLRACE_URL or"
        f" {ClientSettings.url})",
    )  # fmt: skip
    doctor.add_argument("--token", help="API token (default $MILLRACE_TOKEN or the admin's)")
    doctor.add_argument("--ca", metavar="FILE", help="CA file for an https:// node")
    doctor.add_argument("--json", action="store_true", help="the findings as JSON")


def run_doctor(args: argparse.Namespace, rest: list[str]) -> int:
    """Exit status 0 when every finding is OK, 1 otherwise."""
    needs("django", "millrace doctor")
    setup_django()
    from controller_app.operations.doctor import OK, checks_here, checks_of

    url = remote.urls(args)[0]
    findings = [*checks_here(), *checks_of(url, remote.token(args), remote.verify(args))]
    if args.json:
        print(json.dumps([f.__dict__ for f in findings], indent=2))
    else:
        print("\n".join(f.line() for f in findings))
    return EXIT_OK if all(f.status == OK for f in findings) else 1


def _yaml(value: object) -> str:
    """A scalar as YAML reads it (a JSON string is one)."""
    return json.dumps(value)


def scrape_config(
    url: str, token_file: Path, *, job: str, interval: str, rules: list[str], ca: str | None
) -> str:
    """The configuration's text (YAML)."""
    tls = [f"tls_config: {{ca_file: {_yaml(ca)}}}"] if ca else []
    auth = f"authorization: {{type: Bearer, credentials_file: {_yaml(str(token_file))}}}"
    lines = [
        "# Every controller, segment store node, worker and beat of the Millrace node or cluster",
        f"# at {url}, found through its /v1/metrics/targets (millrace scrape-config).",
    ]
    if rules:
        lines += ["rule_files:", *(f"  - {_yaml(str(Path(r).absolute()))}" for r in rules)]
    lines += [
        "scrape_configs:",
        f"  - job_name: {_yaml(job)}",
        f"    scrape_interval: {_yaml(interval)}",
        f"    {auth}",
        *(f"    {line}" for line in tls),
        "    http_sd_configs:",
        f"      - url: {_yaml(url.rstrip('/') + '/v1' + paths.metrics_targets())}",
        '        refresh_interval: "30s"',
        f"        {auth}",
        *(f"        {line}" for line in tls),
    ]
    return "\n".join(lines) + "\n"


def run_scrape_config(args: argparse.Namespace, rest: list[str]) -> int:
    if args.days <= 0:
        raise CommandError("--days must be positive", EXIT_USAGE)
    node = SegmentStoreSettings.from_env()
    token_file = args.token_file or node.data_dir / "prometheus-token"
    try:
        token = mint_token(
            TokenKeys(node.token_secret, node.token_keyring).signing, "*", READ,
            args.days * 86400,
        )  # fmt: skip
        token_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
    except (ValueError, OSError) as exc:
        raise CommandError(f"cannot write the scrape token: {exc}", EXIT_USAGE) from None
    url = remote.urls(args)[0]
    ca = remote.ca(args) if url.startswith("https://") else None
    print(scrape_config(url, token_file.absolute(), job=args.job, interval=args.interval,
                        rules=args.rules, ca=ca), end="")  # fmt: skip
    return EXIT_OK
