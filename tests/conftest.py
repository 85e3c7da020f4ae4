"""Fixtures shared by the whole test suite (pytest-asyncio runs in auto mode)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """In this process, new passwords are hashed with MD5 (Django's advice for test suites:
    the production hasher, PBKDF2 with a million rounds, costs about a second a check on a
    slow machine, and every refused Basic login pays it once). The default hashers stay in
    the list (Millrace's, with the one of imported Pravega passwords), so a hash made by them
    still checks. Whole-process tests (their own nodes) and production keep the defaults."""
    from django.conf import settings

    from tests import timing

    timing.install(config)
    # Every Spark JVM of the suite (and of the processes it starts) reads the tests' Spark
    # configuration: tests/spark_conf/spark-defaults.conf says what and why.
    os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).parent / "spark_conf"))
    # A node's Kafka and metrics ports have fixed defaults (9092, 9093), and a port that is
    # taken stops a node's start: the tests' nodes serve neither unless a test gives them a
    # free port (``Standalone`` does).
    os.environ.setdefault("MILLRACE_KAFKA_PORT", "0")
    os.environ.setdefault("MILLRACE_SEGMENTSTORE_METRICS_PORT", "0")
    fast = "django.contrib.auth.hashers.MD5PasswordHasher"
    settings.PASSWORD_HASHERS = [fast, *settings.PASSWORD_HASHERS]


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to it soon), never one this
    process was given lately."""
    from tests.acceptance.standalone_node import free_ports

    return free_ports(1)[0]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """An empty data directory (what MILLRACE_DATA_DIR points at), removed by pytest."""
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """The test process's own SQLite test database is not synced at every commit
    (``synchronous=NORMAL`` in its WAL mode: safe against a process's crash, not a power
    loss, which no test makes of it): creating it (50-odd migrations) and flushing it after
    each transactional test need not wait on the disk. The nodes and workers
    the tests start keep the product's setting (each commit synced); PostgreSQL is as it is."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        options = database.setdefault("OPTIONS", {})
        options["init_command"] = options.get("init_command", "") + " PRAGMA synchronous=NORMAL;"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On pytest-xdist's workers (``--dist loadgroup``), a module's tests keep to one worker,
    as ``--dist loadscope`` would have them, so that a module's fixtures (its node, its
    browser, its Spark) are made once and not once on each worker; a test marked with a group
    of its own (tests that share a cluster) keeps that group. The Spark tests are one group:
    one worker's Spark session serves them all, one after the other (with the modules spread,
    a session made for one module sat idle while the worker ran other modules for 14 minutes,
    and then ``format("millrace")`` was not found in it: seen once in CI, not reproduced in
    the same modules run back to back). Runs before xdist's own hook, which names each test's
    group in its id (``...::test@group``)."""
    if not hasattr(config, "workerinput"):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            module = item.nodeid.split("::", 1)[0].removeprefix("tests/").removesuffix(".py")
            group = "spark" if module.startswith("spark/") else module
            item.add_marker(pytest.mark.xdist_group(group))
