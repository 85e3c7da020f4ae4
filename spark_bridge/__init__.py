"""The ``millrace`` PySpark data source: batch read and write of Millrace streams.

    import spark_bridge
    spark_bridge.register(spark)
    df = (spark.read.format("millrace").option("controller", "http://127.0.0.1:9091")
          .option("scope", "demo").option("stream", "orders").option("token", token).load())

Runs on Spark executors, so it never imports Django: it talks to Millrace through the Python
client (an import-linter contract in pyproject.toml says so). See docs/components/spark.md.

Its other modules:

* ``arrow``: events to and from Arrow, a column at a time (executors)
* ``avro_arrow``: Avro's binary encoding of Arrow columns, a column at a time (typed writes)
* ``avro_types``: Avro schemas as Spark types and back, as Spark's ``from_avro``/``to_avro``
* ``jobs``: Spark jobs over the ``millrace`` data source, runnable with ``spark-submit`` or
  through the ``millrace ingest`` / ``millrace export`` commands (a local Spark)
* ``options``: the data source's options, parsed once into a frozen dataclass with clear errors
* ``typed``: typed rows (``schema=registry``): events decoded and rows encoded by the stream's
  value subject's Avro schema, in Confluent's wire format
* ``worker_state``: what a Spark Python worker keeps from one task to the next (executors)
"""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
from typing import Any

log = logging.getLogger(__name__)

#: How long the check of a Python for Millrace may take (it imports PySpark).
PYTHON_CHECK_TIMEOUT_SECONDS = 60.0


class SparkSetupError(RuntimeError):
    """Spark's Python workers cannot run the data source; the message says what to set."""


def register(spark: Any) -> None:
    """Make ``format("millrace")`` known to ``spark`` (a ``SparkSession``).

    The data source runs in Spark's Python workers, which start the session's Python
    (``PYSPARK_PYTHON``, else ``python3`` from the ``PATH``). On a local Spark, when that one
    cannot import Millrace, the workers run this process's Python instead (it has Millrace:
    it is running this); elsewhere the check is the cluster's (``spark.pyspark.python``).
    """
    from spark_bridge.source import MillraceDataSource

    _choose_worker_python(spark)
    spark.dataSource.register(MillraceDataSource)


def _choose_worker_python(spark: Any) -> None:
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect: no context here; the server's Python is the server's
        return
    python = context.pythonExec
    if python == sys.executable or not str(context.master).startswith("local"):
        return
    if has_millrace(python):
        return
    log.info(
        "Spark's Python workers would run %r, which cannot import Millrace; they run %s "
        "(set PYSPARK_PYTHON to choose another)", python, sys.executable,
    )  # fmt: skip
    context.pythonExec = sys.executable
    if not has_millrace(sys.executable):
        raise SparkSetupError(
            f"neither {python!r} nor {sys.executable} can import spark_bridge: install "
            "millrace[spark] into the Python of Spark's workers and name it with "
            "spark.pyspark.python (or PYSPARK_PYTHON)"
        )


@functools.cache
def has_millrace(python: str) -> bool:
    """Whether ``python`` can import the data source (and so run Spark's Python workers)."""
    try:
        done = subprocess.run(
            [python, "-c", "import spark_bridge.source"],
            capture_output=True,
            timeout=PYTHON_CHECK_TIMEOUT_SECONDS,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
