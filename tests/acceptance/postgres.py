"""A PostgreSQL server of a test's own (``initdb`` and ``pg_ctl`` on a loopback port, run as
the ``postgres`` user): the ``postgres`` fixture, skipped with a notice where the machine has no
PostgreSQL binaries. The tests stop and start it for real (outages)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.standalone_node import free_ports

__all__ = ["PrivatePostgres", "module_postgres", "postgres"]


class PrivatePostgres:
    """A PostgreSQL server of the test's own in ``where``, on a loopback port."""

    def __init__(self, where: Path, bin_dir: Path, port: int) -> None:
        self.where, self.bin, self.port = where, bin_dir, port
        self.data = where / "pgdata"
        self.url = f"postgres://postgres@127.0.0.1:{port}/postgres"
        #: Addresses listened on besides 127.0.0.1, and the subnet trusted on them (``also``).
        self.listen: list[str] = []
        self.trusted = ""

    def also(self, address: str, subnet: str) -> None:
        """Listen on ``address`` too (a private network's, ``tests.acceptance.netns``), trusting
        ``subnet`` (before ``init``)."""
        self.listen.append(address)
        self.trusted = subnet

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self.where.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.where, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        if self.trusted:
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {self.trusted} trust\n")

    def start(self) -> None:
        listen = ",".join(["127.0.0.1", *self.listen])
        options = f"-p {self.port} -k {self.where} -c listen_addresses={listen} -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l",
                  str(self.where / "postgres.log"), "-w", "start")  # fmt: skip

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


@pytest.fixture
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivatePostgres]:
    yield from private_postgres()


@pytest.fixture(scope="module")
def module_postgres() -> Iterator[PrivatePostgres]:
    """One server for a module whose tests share a cluster (a test that stops it starts it
    again)."""
    yield from private_postgres()


def private_postgres(also: tuple[str, str] | None = None) -> Iterator[PrivatePostgres]:
    """A started server, stopped and removed at the end (a fixture's body); ``also``: an
    address to listen on besides loopback, and the subnet trusted there."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (pg_ctl) on this machine")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres user to run PostgreSQL as")
    # (a folder the postgres user can reach: pytest's own may sit under a private home)
    where = Path(tempfile.gettempdir()) / f"pg-{uuid.uuid4().hex[:8]}"
    server = PrivatePostgres(where, bin_dir, free_ports(1)[0])
    if also is not None:
        server.also(*also)
    server.init()
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            server.stop()
        shutil.rmtree(where, ignore_errors=True)
