"""The streams' writes: idempotent workflow functions, one module per aggregate.

Views, tasks and the CLI call these; nothing else changes the records of scopes, streams,
epochs, transactions, marks, reader groups and key-value tables. Every other record has one
home of its own too (access, the cluster, the registry, quotas, lag, Kafka's records, the
audit log, the operations' heartbeats and probes): ``tests/test_tidy.py`` (``WRITE_HOMES``)
fails on a write anywhere else.
Each function checks the state it expects, so running it twice (a retried request, a task
delivered twice) does no harm. Errors are ``controller_app.errors`` classes, which the REST
layer maps to status codes: ``NotFoundError`` 404, ``AlreadyExistsError`` 409,
``PreconditionFailedError`` 412, ``InvalidArgumentError`` / ``InvalidStreamCutError`` 400,
``ConflictError`` 409, ``WorkflowTimeoutError`` 504 (the work goes on).

The public surface (signatures are the contract between the API, the CLI and the tasks).
A function that works on segments takes the segment-store port (``ports.SegmentStorePort``) as its
first argument, written ``store`` below; the edges (tasks, views) pass
``segment_client.segment_store()``:

``scopes``
    ``create_scope(name) -> Scope``  (AlreadyExistsError if it exists)
    ``delete_scope(name) -> None``  (PreconditionFailedError unless empty)

``streams``
    ``create_stream(store, scope, name, config: StreamConfig) -> Stream``  creates the segments of
        epoch 0 in the segment store and returns the stream ACTIVE (a retry of the same
        create completes a half-done one; a different existing config -> AlreadyExistsError)
    ``update_stream(scope, name, config, *, wait) -> Stream``
    ``seal_stream(scope, name, *, wait) -> Stream``
    ``delete_stream(scope, name, *, wait) -> None``  (PreconditionFailedError unless SEALED)
    ``scale_stream(scope, name, sealed_segment_ids, new_ranges, *, scale_time=None, wait)
        -> EpochTransition``
    ``truncate_stream(store, scope, name, stream_cut: {segment id: offset}, *, wait)
        -> Stream``
    Request workflows record their intent, send the Celery task on commit and, when ``wait``
    is not None, poll the database until the workflow is done (WorkflowTimeoutError after
    ``wait`` seconds; the work then completes in the background).

``transactions``
    ``create_transaction(store, scope, name, *, lease_ms, writer_id="") -> Transaction``
    ``ping_transaction(scope, name, txn_id: uuid.UUID, lease_ms) -> Transaction``
    ``commit_transaction(scope, name, txn_id, *, writer_id="", timestamp=None) -> Transaction``
    ``abort_transaction(scope, name, txn_id) -> Transaction``
    ``transaction_state(scope, name, txn_id) -> str``  (a ``TxnState`` value)

``marks``
    ``note_writer_mark(scope, name, writer_id, timestamp, position: {segment id: offset})``

``reader_groups``
    ``create_reader_group(store, scope, name, config)``, ``reset_reader_group(store, scope,
    name, config=None)`` (they read the tail of a stream) and the reader calls

Task steps (``run_seal``, ``run_delete``, ``run_scale``, ``run_truncate``, ``run_commits``,
``run_abort``, ``complete_create``) take ``(store, id)``.

Its other modules:

* ``autoscale``: auto-scaling
* ``buckets``: periodic services over stream buckets (Pravega's stream buckets)
* ``common``: what every workflow module shares
* ``kvtables``: key-value tables
* ``retention``: retention
* ``room``: room in a scope: what it holds against the counts its quota allows
* ``sweeper``: the sweeper
"""
