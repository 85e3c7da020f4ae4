"""Fixtures of the Spark bridge's tests: one local Spark (``local[2]``, the machine's Java)
per test session, and a standalone node per module."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.acceptance.standalone_node import Standalone, running_standalone


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local SparkSession with the ``millrace`` data source registered; its start-up is paid
    once per test session."""
    from pyspark.sql import SparkSession

    import spark_bridge

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("millrace-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.task.maxFailures", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_bridge.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory, "spark", {})


def options(node: Standalone, stream: str, scope: str = "sp", **more: Any) -> dict[str, str]:
    """The data source's options for ``scope/stream`` of ``node``."""
    return {
        "controller": node.base, "scope": scope, "stream": stream, "token": node.token,
        **{k: str(v) for k, v in more.items()},
    }  # fmt: skip
