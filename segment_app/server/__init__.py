"""The segment store's network face: Pravega's wire protocol over TCP, and delegation tokens.

The codec is ``millrace.kernel.wire`` (shared with ``millrace.client``); ``server`` /
``connection`` / ``requests`` / ``replies`` serve a ``SegmentStoreAPI``; ``auth`` checks tokens;
``node`` runs a whole segment store process. See ``docs/components/wire-protocol.md``. The
engine never imports this package.

Its other modules:

* ``appends``: a connection's pipelined append path (sessions, blocks, replies in order)
* ``locate``: ``LocateOffset``
* ``membership``: a node's membership of a cluster
* ``metrics``: the segment store node's metrics port (``MILLRACE_SEGMENTSTORE_METRICS_PORT``,
  9093)
* ``quotas``: scopes' quotas on a node: appends and reads delayed to its share of the rates,
  appends refused at a stored-bytes limit
* ``services``: the wire server's configuration (``ServerConfig``) and the pieces it hands each
  connection (``ConnectionServices``)
* ``schema_guard``: appends held to their streams' schemas (``--schemas``)
* ``traffic``: the traffic monitor
"""
