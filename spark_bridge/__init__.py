"""The ``millrace`` PySpark data source: batch read and write of Millrace streams.

    import spark_bridge
    spark_bridge.register(spark)
    df = (spark.read.format("millrace").option("controller", "http://127.0.0.1:9091")
          .option("scope", "demo").option("stream", "orders").option("token", token).load())

Runs on Spark executors, so it never imports Django: it talks to Millrace through the Python
client (an import-linter contract in pyproject.toml says so). See docs/components/spark.md.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Make ``format("millrace")`` known to ``spark`` (a ``SparkSession``)."""
    from spark_bridge.source import MillraceDataSource

    spark.dataSource.register(MillraceDataSource)
