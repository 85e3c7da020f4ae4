"""``millrace tls dev-cert``: a development CA and a node certificate signed by it, for trying
TLS on one machine or a test network (the security guide's first step).

Not for production: the CA's key sits next to its certificate, unprotected, and every process
gets the same node certificate. A deployment's certificates come from its own CA.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
from pathlib import Path
from typing import Any

from millrace.kernel.config import write_secret_file
from millrace.ops.cli.base import EXIT_OK, CommandError, Parents, command, needs


def register(commands: Any, parents: Parents) -> None:
    tls = command(commands, "tls", None, "Certificates for TLS.", parents=[parents.data_dir])
    verbs = tls.add_subparsers(dest="verb", metavar="VERB", required=True)
    dev = command(
        verbs, "dev-cert", run_dev_cert,
        "Make a development CA and a node certificate it signs (ca.pem, node.pem, node.key)"
        " naming localhost, 127.0.0.1, this host's name and every --name. Not for production.",
    )  # fmt: skip
    dev.add_argument("--dir", default="tls", help="where the files go (default ./tls)")
    dev.add_argument(
        "--name", action="append", default=[], metavar="NAME",
        help="another host name or IP address the certificate names (repeat for more)",
    )  # fmt: skip
    dev.add_argument("--force", action="store_true", help="replace files that exist")


def dev_names(extra: list[str]) -> list[str]:
    """The names a development certificate holds: loopback, this host's name, and ``extra``."""
    names = ["localhost", "127.0.0.1", socket.gethostname(), *extra]
    unique: list[str] = []
    for name in names:
        if not name or name in unique:
            continue
        try:
            ipaddress.ip_address(name)
        except ValueError:
            if not all(part.replace("-", "").isalnum() for part in name.split(".")):
                raise CommandError(
                    f"--name {name!r} is neither a host name nor an IP address"
                ) from None
        unique.append(name)
    return unique


def run_dev_cert(args: argparse.Namespace, rest: list[str]) -> int:
    trustme = needs("trustme", "making a development certificate")
    where = Path(args.dir)
    files = {name: where / name for name in ("ca.pem", "node.pem", "node.key")}
    present = [str(path) for path in files.values() if path.exists()]
    if present and not args.force:
        raise CommandError(f"{', '.join(present)} exist already: --force replaces them")
    names = dev_names(args.name)
    where.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="Millrace development CA")
    leaf = ca.issue_cert(*names)
    files["ca.pem"].write_bytes(ca.cert_pem.bytes())
    files["node.pem"].write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    write_secret_file(files["node.key"], leaf.private_key_pem.bytes().decode().strip())
    print(f"wrote {files['ca.pem']}, {files['node.pem']} and {files['node.key']} (for: "
          f"{', '.join(names)}); a node serves TLS with:")  # fmt: skip
    print(f"  export MILLRACE_TLS_ENABLED=1 MILLRACE_TLS_CERT_FILE={files['node.pem'].resolve()}")
    print(f"  export MILLRACE_TLS_KEY_FILE={files['node.key'].resolve()}")
    print(f"  export MILLRACE_TLS_CA_FILE={files['ca.pem'].resolve()}")
    return EXIT_OK
