"""The controller role (control plane): scopes, streams, epochs, transactions, reader groups.

``models/`` holds the metadata (one module per aggregate), ``choices.py`` the states and their
allowed transitions, ``selectors.py`` the reads, ``segments.py`` the pure segment and
stream-cut rules. Workflows, tasks and the REST API come next (see ARCHITECTURE.md).

Its other modules:

* ``acl``: managing grants: grant, deny, revoke, list, check, groups' members, Pravega's
  password file imported
* ``api``: the controller's REST API
* ``apps``: Django app of the controller role
* ``audit``: writing the audit log (``models.AuditEntry``)
* ``beat``: beat's scheduler and the worker's heartbeat
* ``canary``: an event written to and read back from every segment store node on a schedule
* ``cluster``: the cluster: node sessions, the leader's lease and its container assignments
* ``dispatch``: sending the controller's Celery tasks by name
* ``doctor``: ``millrace doctor``'s checks of a deployment, one finding per line
* ``errors``: errors of the controller's metadata layer, raised by selectors and the state
  helper
* ``grants``: who may do what to which resource (Pravega's resource strings), judged for every
  face
* ``grpc``: Pravega's Client-Controller API over gRPC, for Pravega's own clients
* ``health``: the node's health tree
* ``heartbeats``: signs of life of the Celery worker and beat processes
* ``lag``: reader-group lag, measured and judged by the controller
* ``metrics``: the controller's Prometheus metrics, read from its metadata at each scrape
* ``outages``: the services around a node that can be away
* ``outcomes``: how every face answers an error
* ``ports``: the controller's port to the segment store, as the workflows see it
* ``process_port``: the metrics port of a worker or beat (``/live``, ``/ready``, ``/metrics``)
* ``quotas``: quotas per scope: set, shown with their use, and enforced (the nodes' exchange,
  stored bytes)
* ``reader_group_state``: the live state of a reader group, and every change to it, as plain
  Python (no database)
* ``registry``: the schema registry (Confluent's Schema Registry API, its formats and rules)
* ``roles``: the three roles (viewer, operator, admin): the defaults of users without grants
* ``scrape``: where Prometheus finds every process (``GET /v1/metrics/targets``)
* ``segment_client``: the controller's port to the segment store over the wire client
  (``ports.SegmentStorePort``)
* ``signin``: sign-ins on the open network
* ``stream_reads``: reading a stream in pages for HTTP clients
* ``tails``: WebSocket tail reads, served by the controller's ASGI process
* ``task_names``: the names of the controller's Celery tasks and the queues they go to
* ``tokens``: API tokens and the segment store's delegation tokens
* ``tracing``: traces of the controller, worker and beat (``MILLRACE_TRACES``)
* ``users``: users and their roles, made by the local commands (``millrace user ...``,
  ``millrace token create``), the console's Security page and the standalone's first
  administrator
* ``workflows``: every controller write
"""
