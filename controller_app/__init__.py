"""The controller role (control plane): scopes, streams, epochs, transactions, reader groups.

``models/`` holds the metadata (one module per aggregate), ``choices.py`` the states and their
allowed transitions, ``selectors.py`` the reads, ``segments.py`` the pure segment and
stream-cut rules. Workflows, tasks and the REST API come next (see ARCHITECTURE.md).

Its other modules:

* ``access``: who may do what: users, roles, tokens, grants and sign-ins
* ``api``: the controller's REST API
* ``apps``: Django app of the controller role
* ``audit``: writing the audit log (``models.AuditEntry``)
* ``beat``: beat's scheduler and the worker's heartbeat
* ``cluster``: the cluster: node sessions, the leader's lease and its container assignments
* ``dispatch``: sending the controller's Celery tasks by name
* ``errors``: errors of the controller's metadata layer, raised by selectors and the state
  helper
* ``event_writers``: the controller's own event writers (the REST API's appends, the canary)
* ``grpc``: Pravega's Client-Controller API over gRPC, for Pravega's own clients
* ``kafka_catalog``: what a node's Kafka listener reads and changes in the metadata database
  (topics, users and grants, committed offsets, producer ids)
* ``kafka_lag``: Kafka consumer groups in the lag round (records, bytes, seconds, status)
* ``lag``: reader-group lag, measured and judged by the controller
* ``operations``: running a node: its health, heartbeats, metrics, probes, traces, the canary
  and ``millrace doctor``
* ``outages``: the services around a node that can be away
* ``outcomes``: how every face answers an error
* ``ports``: the controller's port to the segment store, as the workflows see it
* ``quotas``: quotas per scope: set, shown with their use, and enforced (the nodes' exchange,
  stored bytes)
* ``reader_group_state``: the live state of a reader group, and every change to it, as plain
  Python (no database)
* ``registry``: the schema registry (Confluent's Schema Registry API, its formats and rules)
* ``segment_client``: the controller's port to the segment store over the wire client
  (``ports.SegmentStorePort``)
* ``stream_reads``: reading a stream in pages for HTTP clients
* ``tails``: WebSocket tail reads, served by the controller's ASGI process
* ``task_names``: the names of the controller's Celery tasks and the queues they go to
* ``workflows``: every controller write
"""
