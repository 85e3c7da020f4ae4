"""Celery tasks of the controller: thin wrappers that re-fetch by id and run one workflow step.

Every task is acknowledged late (a worker killed mid-task leaves the message to be delivered
again) and every step checks the state it expects, so a task that runs twice, or twice at
once, does no harm. A task owns only its retry policy: a stream busy with another workflow
postpones it (``Postpone``), a lost compare-and-swap retries soon, an unreachable segment
store retries with a growing delay. Queues (Pravega's event-processor streams):
``controller.requests`` (create, seal, delete, scale, truncate: serialized per stream by the
stream's state), ``controller.commits`` (serial per stream, by the COMMITTING_TXN state) and
``controller.aborts`` (concurrent). The periodic jobs (sweeper, transaction timeouts, cleanup,
retention and watermark rounds) run on the default queue, sent by Celery beat; a round sends
one task per stream bucket with work (``workflows.buckets``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError, IntegrityError
from django.db.models import F, QuerySet

from controller_app import dispatch, kafka_lag, lag, quotas
from controller_app.choices import BucketService, RetentionPolicyType, StreamState
from controller_app.errors import (
    ConflictError,
    NoNodeForSegmentError,
    SegmentStoreUnavailableError,
)
from controller_app.models import Stream, TaskCount
from controller_app.operations import canary
from controller_app.segment_client import read_traffic, segment_store
from controller_app.workflows import (
    autoscale,
    buckets,
    marks,
    retention,
    scale,
    streams,
    sweeper,
    transactions,
    truncate,
)
from controller_app.workflows.transactions import Postpone

log = logging.getLogger(__name__)

#: Seconds before a postponed task (stream busy) runs again.
POSTPONE_SECONDS = 0.5
#: Seconds before a task that lost a race runs again.
CONFLICT_RETRY_SECONDS = 0.1
#: First and largest delay before retrying when the segment store cannot be reached.
STORE_RETRY_SECONDS, STORE_RETRY_SECONDS_MAX = 1.0, 30.0
_UNREACHABLE = (SegmentStoreUnavailableError, NoNodeForSegmentError, OSError)


def _run(task: Any, step: Callable[..., Any], *args: Any) -> None:
    """Run ``step(store, *args)`` with the process's segment-store port; own the retries;
    count the outcome (``TaskCount``: ok, retry, failed)."""
    try:
        step(segment_store(), *args)
    except Postpone as exc:
        _count(task.name, "retry")
        raise task.retry(countdown=POSTPONE_SECONDS, exc=exc, max_retries=None) from None
    except (ConflictError, IntegrityError) as exc:
        _count(task.name, "retry")
        raise task.retry(countdown=CONFLICT_RETRY_SECONDS, exc=exc, max_retries=None) from None
    except (*_UNREACHABLE, DatabaseError, TimeoutError) as exc:
        delay = min(
            STORE_RETRY_SECONDS * 2 ** min(task.request.retries, 5), STORE_RETRY_SECONDS_MAX
        )
        log.warning("%s(%s) will retry in %.1f s: %s", task.name, args, delay, exc)
        _count(task.name, "retry")
        raise task.retry(countdown=delay, exc=exc, max_retries=None) from None
    except Exception:
        _count(task.name, "failed")
        raise
    _count(task.name, "ok")


def _count(task: str, outcome: str) -> None:
    """One more ``outcome`` of ``task`` (best effort: a database that cannot take it now
    costs a count, never the task)."""
    try:
        if not TaskCount.objects.filter(task=task, outcome=outcome).update(count=F("count") + 1):
            TaskCount.objects.get_or_create(task=task, outcome=outcome)
            TaskCount.objects.filter(task=task, outcome=outcome).update(count=F("count") + 1)
    except DatabaseError as exc:
        log.warning("could not count %s of %s: %s", outcome, task, exc)


_OPTIONS: dict[str, Any] = {"bind": True, "acks_late": True, "reject_on_worker_lost": True}


@shared_task(name=dispatch.CREATE_STREAM, **_OPTIONS)
def create_stream(self: Any, stream_id: int) -> None:
    _run(self, streams.complete_create, stream_id)


@shared_task(name=dispatch.SEAL_STREAM, **_OPTIONS)
def seal_stream(self: Any, stream_id: int) -> None:
    _run(self, streams.run_seal, stream_id)


@shared_task(name=dispatch.DELETE_STREAM, **_OPTIONS)
def delete_stream(self: Any, stream_id: int) -> None:
    _run(self, streams.run_delete, stream_id)


@shared_task(name=dispatch.SCALE_STREAM, **_OPTIONS)
def scale_stream(self: Any, stream_id: int) -> None:
    _run(self, scale.run_scale, stream_id)


@shared_task(name=dispatch.TRUNCATE_STREAM, **_OPTIONS)
def truncate_stream(self: Any, stream_id: int) -> None:
    _run(self, truncate.run_truncate, stream_id)


@shared_task(name=dispatch.COMMIT_TRANSACTIONS, **_OPTIONS)
def commit_transactions(self: Any, stream_id: int) -> None:
    _run(self, transactions.run_commits, stream_id)


@shared_task(name=dispatch.ABORT_TRANSACTION, **_OPTIONS)
def abort_transaction(self: Any, txn_pk: int) -> None:
    _run(self, transactions.run_abort, txn_pk)


# -- periodic ----------------------------------------------------------------------------------


@shared_task(name=dispatch.SWEEP, ignore_result=True)
def sweep() -> int:
    """Re-send the task of every workflow left half-way (``workflows.sweeper``)."""
    return sweeper.sweep()


@shared_task(name=dispatch.TRANSACTION_TIMEOUTS, ignore_result=True)
def transaction_timeouts() -> int:
    return transactions.abort_expired()


@shared_task(name=dispatch.COMPLETED_TRANSACTION_CLEANUP, ignore_result=True)
def completed_transaction_cleanup() -> int:
    return transactions.cleanup_completed()


# -- rounds over stream buckets ----------------------------------------------------------------


def _lease_ms(period_s: int) -> int:
    """How long a bucket's round may hold it: two periods and a little (a worker killed
    mid-round holds its bucket no longer)."""
    return (2 * period_s + 5) * 1000


def _retention_streams() -> QuerySet[Stream]:
    return Stream.objects.exclude(retention_type=RetentionPolicyType.NONE).filter(
        state=StreamState.ACTIVE
    )


def _watermark_streams() -> QuerySet[Stream]:
    return Stream.objects.filter(writer_marks__is_alive=True).distinct()


def _send_buckets(service: str, streams: QuerySet[Stream], task: str) -> int:
    """Send ``task`` for every bucket of ``service`` holding one of ``streams``."""
    found = buckets.buckets_with(service, streams)
    for bucket in found:
        dispatch.send(task, bucket)
    return len(found)


@shared_task(name=dispatch.RETENTION, ignore_result=True)
def retention_round() -> int:
    """Send a retention task for every bucket holding a stream with a retention policy."""
    return _send_buckets(BucketService.RETENTION, _retention_streams(), dispatch.RETENTION_BUCKET)


@shared_task(name=dispatch.RETENTION_BUCKET, ignore_result=True, acks_late=True)
def retention_bucket(bucket: int) -> int:
    period = settings.MILLRACE.retention_period_s
    store = segment_store()
    return buckets.run_bucket(
        BucketService.RETENTION, bucket, _lease_ms(period), _retention_streams(),
        lambda stream: retention.apply_retention(store, stream, period * 1000),
    )  # fmt: skip


@shared_task(name=dispatch.WATERMARKS, ignore_result=True)
def watermark_round() -> int:
    """Send a watermark task for every bucket holding a stream with live writer marks."""
    return _send_buckets(
        BucketService.WATERMARKING, _watermark_streams(), dispatch.WATERMARK_BUCKET
    )


@shared_task(name=dispatch.WATERMARK_BUCKET, ignore_result=True, acks_late=True)
def watermark_bucket(bucket: int) -> int:
    period = settings.MILLRACE.watermark_period_s
    return buckets.run_bucket_at_once(
        BucketService.WATERMARKING, bucket, _lease_ms(period), _watermark_streams(),
        marks.compute_watermarks,
    )  # fmt: skip


@shared_task(name=dispatch.AUTOSCALE, ignore_result=True)
def autoscale_round() -> int:
    """Read the traffic monitors once and start the scales the rate-scaled streams need."""
    web = settings.MILLRACE
    config = autoscale.AutoscaleSettings(
        web.autoscale_window_s, web.autoscale_cooldown_s, web.autoscale_mute_s
    )
    streams_ = autoscale.rate_streams()
    if not streams_:
        return 0
    traffic = read_traffic()
    return sum(
        autoscale.autoscale_stream(stream, traffic, config) is not None for stream in streams_
    )


@shared_task(name=dispatch.READER_GROUP_LAG, ignore_result=True)
def reader_group_lag_round() -> int:
    """Measure every reader group's and Kafka consumer group's lag and judge its status
    (``controller_app.lag``, ``controller_app.kafka_lag``)."""
    return lag.lag_round(segment_store(), read_traffic, also=kafka_lag.measure_kafka_groups)


@shared_task(name=dispatch.CANARY, ignore_result=True)
def canary_round() -> dict[str, str]:
    """Write to and read back from every node's canary segments
    (``controller_app.operations.canary``)."""
    return canary.canary_round(segment_store())


@shared_task(name=dispatch.QUOTAS, ignore_result=True)
def quota_round() -> dict[str, int]:
    """Measure the stored bytes of the scopes with a stored-bytes quota, truncating those over
    it that say so (``controller_app.quotas``)."""
    return quotas.stored_round(segment_store())
