"""The segment store's Kafka face: Kafka's binary protocol over the node's segments
(``MILLRACE_KAFKA_PORT``, 9092; docs/components/kafka.md).

``server`` listens and answers each connection's requests in turn; ``codec`` decodes requests
and encodes replies with kio's entities; ``handlers`` is the table of API keys, answered by
``admin_requests``, ``record_requests`` and ``group_requests`` with the node's ``context``.

Its other modules:

* ``partitions``: a partition's offsets over its segment, and its appends
* ``record_meta``: the companion segment of records' times, keys and headers
* ``groups``: the classic consumer group coordinator
"""
