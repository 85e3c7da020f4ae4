"""Spark jobs over the ``millrace`` data source, runnable with ``spark-submit`` or through the
``millrace ingest`` / ``millrace export`` commands (a local Spark).

Its other modules:

* ``common``: what the jobs share
"""
