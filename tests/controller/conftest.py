"""Fixtures for controller tests: a real segment store node and a real Celery worker.

* ``segment_store_node`` (session): ``millrace segmentstore`` as a subprocess on a free port,
  file tier-1 and filesystem tier-2 in a temporary directory, authentication on with a token
  secret this test process shares (the controller mints delegation tokens with it).
* ``registered_node`` (per test): the node registered as the owner of every container in the
  test database, so workflows reach it.
* ``live_worker`` (per test, needs ``django_db(transaction=True)``): a ``millrace worker``
  subprocess on the same database as the test (the SQLite test database is a file, see
  ``DATABASES["default"]["TEST"]`` in the settings; on PostgreSQL the test database) and the
  same broker (Redis when ``REDIS_URL`` is set, else the filesystem broker of a temporary data
  directory). Its queues are purged first. ``live_worker.kill()`` sends SIGKILL,
  ``live_worker.start(crash_at=...)`` starts it again (``crash_at``: the TEST-ONLY step after
  which the worker kills itself, ``MILLRACE_TEST_CRASH_AT``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller_app import segment_client
from controller_app.cluster import membership
from millrace.client.transport.sync import SyncSegmentStoreClient
from millrace.kernel.claims import READ_UPDATE, mint_token

TOKEN_SECRET = "controller-tests-token-secret-0123456789abcdef"
CONTAINERS = 4
_LISTENING = re.compile(rb"listening on 127\.0\.0\.1:(\d+)")
_REPOSITORY = Path(__file__).resolve().parents[2]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_TEST_")}


class NodeProcess:
    def __init__(self, data_dir: Path) -> None:
        env = _clean_env() | {
            "MILLRACE_TOKEN_SECRET": TOKEN_SECRET,
            "MILLRACE_AUTH": "on",
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("DATABASE_URL", None)
        self.data_dir = data_dir
        self.log = data_dir.with_suffix(".log")
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "millrace.ops.cli", "segmentstore",
                 "--data-dir", str(data_dir), "--port", "0", "--containers", str(CONTAINERS)],
                env=env, stdout=subprocess.PIPE, stderr=log, cwd=_REPOSITORY,
                start_new_session=True,
            )  # fmt: skip
        assert self.process.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            match = _LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
                return
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError(f"segment store did not start: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)


@pytest.fixture(scope="session")
def segment_store_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    from django.conf import settings

    os.environ["MILLRACE_TOKEN_SECRET"] = TOKEN_SECRET  # for the processes the tests start
    settings.MILLRACE = dataclasses.replace(settings.MILLRACE, token_secret=TOKEN_SECRET)
    node = NodeProcess(tmp_path_factory.mktemp("segmentstore") / "data")
    yield node
    segment_client.segment_store().close()
    node.stop()


@pytest.fixture
def api(db: None) -> Any:
    """A DRF test client authenticated with the API token of a new operator."""
    import uuid

    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from controller_app.access.roles import grant

    user = get_user_model().objects.create_user(f"u{uuid.uuid4().hex[:8]}", password=None)
    grant(user, "operator")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.fixture
def registered_node(segment_store_node: NodeProcess, db: None) -> NodeProcess:
    membership.register_node(
        host="127.0.0.1", port=segment_store_node.port, container_count=CONTAINERS
    )
    return segment_store_node


@pytest.fixture
def wire(registered_node: NodeProcess) -> Iterator[Any]:
    """A wire-protocol client of the registered node with a token for every segment."""
    token = mint_token(TOKEN_SECRET, "*", READ_UPDATE, 600)
    client = SyncSegmentStoreClient("127.0.0.1", registered_node.port, delegation_token=token)
    yield client
    client.close()


def write_events(port: int, segment: str, *payloads: bytes) -> None:
    """Append ``payloads`` to ``segment`` over the wire protocol, as a new writer; wait for
    their acknowledgement."""
    import uuid

    from millrace.client.transport.sync import SyncSegmentStoreClient
    from millrace.kernel.claims import READ_UPDATE, mint_token

    token = mint_token(TOKEN_SECRET, "*", READ_UPDATE, 600)
    client = SyncSegmentStoreClient("127.0.0.1", port, delegation_token=token)
    try:
        writer = uuid.uuid4()
        client.setup_append(segment, writer)
        client.append_block(writer, list(payloads)).result(10)
    finally:
        client.close()


class LiveWorker:
    """A ``millrace worker`` subprocess sharing the test's database and broker."""

    def __init__(self, data_dir: Path) -> None:
        from django.conf import settings
        from django.db import connection

        self.data_dir = data_dir
        self.env = _clean_env() | {
            "MILLRACE_TOKEN_SECRET": TOKEN_SECRET,
            "MILLRACE_DATA_DIR": str(data_dir),
            "PYTHONUNBUFFERED": "1",
        }
        database = connection.settings_dict
        if connection.vendor == "sqlite":
            self.env["MILLRACE_TEST_SQLITE_NAME"] = str(database["NAME"])
        else:
            user = database["USER"] or "postgres"
            self.env["DATABASE_URL"] = (
                f"postgres://{user}@{database['HOST'] or '127.0.0.1'}:{database['PORT'] or 5432}"
                f"/{database['NAME']}"
            )
        self.broker = settings.CELERY_BROKER_URL
        self.process: subprocess.Popen[bytes] | None = None
        self.log = data_dir / "worker.log"

    def start(self, crash_at: str = "", concurrency: int = 1) -> LiveWorker:
        env = dict(self.env)
        if crash_at:
            env["MILLRACE_TEST_CRASH_AT"] = crash_at
        offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "millrace.ops.cli", "worker",
                 "--data-dir", str(self.data_dir), "--concurrency", str(concurrency),
                 "--pool", "solo" if concurrency == 1 else "threads"],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=_REPOSITORY,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while b"ready." not in self.log.read_bytes()[offset:]:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start: {self.output()[-3000:]}")
            time.sleep(0.1)
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_dead(self, timeout: float = 60) -> None:
        assert self.process is not None
        self.process.wait(timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def purge(self) -> None:
        from millrace.project.celery import app, worker_queues

        with app.connection_for_write() as conn:
            for queue in worker_queues():
                with contextlib.suppress(Exception):
                    conn.default_channel.queue_purge(queue)


@pytest.fixture
def live_worker(
    registered_node: NodeProcess, transactional_db: None, tmp_path: Path
) -> Iterator[Any]:
    from django.conf import settings

    data_dir = tmp_path / "worker-data"
    data_dir.mkdir()
    if settings.MILLRACE.redis_url is None:
        # The filesystem broker of this test process, pointed at by the worker's data dir.
        broker_dir = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]).parent
        (data_dir / "celery").symlink_to(broker_dir)
    worker = LiveWorker(data_dir)
    worker.purge()
    worker.start()
    yield worker
    worker.kill()
