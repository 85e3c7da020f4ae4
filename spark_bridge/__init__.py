"""PySpark data source ``millrace`` and bulk-ingest jobs (not built yet).

Runs on Spark executors, so it must never import Django: it talks to Millrace only through the
wire protocol and the REST API (enforced by an import-linter contract in pyproject.toml).
"""
