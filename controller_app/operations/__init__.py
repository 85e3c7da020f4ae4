"""Running a node: what tells an operator whether it is well, and what it measures.

These modules read the controller's records and the processes' status files; of the records
they write only their own (the heartbeats' rows, the canary's probes). The domain (streams,
transactions, reader groups, quotas) lives beside this package, never in it.

Its modules:

* ``canary``: an event written to and read back from every segment store node on a schedule
* ``doctor``: ``millrace doctor``'s checks of a deployment, one finding per line
* ``health``: the node's health tree
* ``heartbeats``: signs of life of the Celery worker and beat processes
* ``metrics``: the controller's Prometheus metrics, read from its metadata at each scrape
* ``process_port``: the metrics port of a worker or beat (``/live``, ``/ready``, ``/metrics``)
* ``scrape``: where Prometheus finds every process (``GET /v1/metrics/targets``)
* ``tracing``: traces of the controller, worker and beat (``MILLRACE_TRACES``)
"""
