"""The kernel: what the client, the segment store and the controller all share.

The domain defaults every side shares (``defaults``), the wire codec (``wire``), the REST API's
paths as clients spell them (``rest_paths``), segment names and ids (``naming``), delegation-
token claims and the token-secret keyring (``claims``), typed settings read from the environment
(``config``), logging with redaction (``logs``), TLS contexts (``tls``), the cluster membership
contract (``membership``), the schema policy a segment store holds streams' appends to
(``schema_policy``), the scope quotas it holds them to (``quotas``), how Kafka's topics are
streams and what a node's Kafka listener asks of the metadata (``kafka_topics``), key-value
table keys and placement (``kvt``), status files (``status_files``), the HTTP port each process
answers probes and scrapes on (``metrics_port``), OpenTelemetry's spans, off unless set up
(``traces``), the event loop the server and blocking clients run on (``event_loop``) and the
allocator tuning of bulk-data processes (``memory``). It imports no Django and no role: the
standard library, small codecs (``crc32c``, ``mmh3``, ``pyjwt``), numpy (the wire's receive
buffers), ``tiers`` (for the names of backends), prometheus-client (``metrics_port`` only, which
the server roles import), OpenTelemetry only when installed, uvloop only when installed and
asked for, and uvicorn only inside the function that configures its logging."""
