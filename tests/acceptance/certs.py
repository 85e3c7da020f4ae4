"""Certificates made by the tests (``trustme``): a CA, node certificates, and bad ones."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import trustme

#: The names a node's certificate lists: loopback, by address and by name.
LOOPBACK = ("127.0.0.1", "localhost")


class Certs:
    """A test CA and the files of certificates it issued, under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA()
        self.ca_file = folder / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    def issue(
        self,
        name: str,
        *identities: str,
        expired: bool = False,
        ca: trustme.CA | None = None,
    ) -> tuple[Path, Path]:
        """(certificate chain file, key file) of a new certificate for ``identities``
        (default: loopback), written as ``<name>.pem`` / ``<name>.key``: ``expired`` ended
        yesterday; ``ca`` signs it instead of this CA (an unknown CA)."""
        now = datetime.datetime.now(datetime.UTC)
        window = {}
        if expired:
            window = {"not_before": now - datetime.timedelta(days=30),
                      "not_after": now - datetime.timedelta(days=1)}  # fmt: skip
        leaf = (ca or self.ca).issue_cert(*(identities or LOOPBACK), **window)
        cert, key = self.folder / f"{name}.pem", self.folder / f"{name}.key"
        write_atomically(cert, b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        write_atomically(key, leaf.private_key_pem.bytes())
        return cert, key

    def env(self, cert: Path, key: Path, **more: str) -> dict[str, str]:
        """A process's TLS variables: on, with ``cert``/``key`` and this CA."""
        return {
            "MILLRACE_TLS_ENABLED": "1",
            "MILLRACE_TLS_CERT_FILE": str(cert),
            "MILLRACE_TLS_KEY_FILE": str(key),
            "MILLRACE_TLS_CA_FILE": str(self.ca_file),
            "MILLRACE_TLS_RELOAD_S": "1",
            **more,
        }


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` whole (as a secret mounted by an orchestrator is)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
