"""The names of the controller's Celery tasks and the queues they go to: one home for both,
read by ``dispatch`` (which sends by name), ``tasks`` (which registers them) and the project's
settings (routes and beat schedule). No Django import: the settings import it while loading."""

from __future__ import annotations

CREATE_STREAM = "millrace.create_stream"
SEAL_STREAM = "millrace.seal_stream"
DELETE_STREAM = "millrace.delete_stream"
SCALE_STREAM = "millrace.scale_stream"
TRUNCATE_STREAM = "millrace.truncate_stream"
COMMIT_TRANSACTIONS = "millrace.commit_transactions"
ABORT_TRANSACTION = "millrace.abort_transaction"
SWEEP = "millrace.sweep"
TRANSACTION_TIMEOUTS = "millrace.transaction_timeouts"
COMPLETED_TRANSACTION_CLEANUP = "millrace.completed_transaction_cleanup"
RETENTION = "millrace.retention"
RETENTION_BUCKET = "millrace.retention_bucket"
WATERMARKS = "millrace.watermarks"
WATERMARK_BUCKET = "millrace.watermark_bucket"
AUTOSCALE = "millrace.autoscale"
READER_GROUP_LAG = "millrace.readergroup_lag"
CANARY = "millrace.canary"
QUOTAS = "millrace.quotas"

#: Pravega's event-processor streams: requests serialized per stream (by its state), commits
#: serial per stream, aborts concurrent. ``millrace worker`` consumes every queue named here.
ROUTES = {
    **{
        name: {"queue": "controller.requests"}
        for name in (CREATE_STREAM, SEAL_STREAM, DELETE_STREAM, SCALE_STREAM, TRUNCATE_STREAM)
    },
    COMMIT_TRANSACTIONS: {"queue": "controller.commits"},
    ABORT_TRANSACTION: {"queue": "controller.aborts"},
}
