"""Periodic services over stream buckets (Pravega's stream buckets).

Each stream hashes to a bucket per service (``StreamBucket``). Beat sends one round per
service; the round sends one task per bucket that has streams with work, so the work spreads
over the workers. A bucket's task runs only while it holds the bucket's lease
(``BucketLease``): two tasks of the same bucket (a slow round overtaken by the next, a
redelivered task) never visit a stream at once, and a worker killed mid-round holds the
bucket until its lease expires (then the next round takes it). One stream's failure is
logged and the round goes on with the others.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator

from django.db import IntegrityError
from django.db.models import QuerySet

from controller_app.choices import BucketService
from controller_app.models import BucketLease, Stream, StreamBucket
from controller_app.workflows.common import now_ms

log = logging.getLogger(__name__)


def buckets_with(service: str, streams: QuerySet[Stream]) -> list[int]:
    """The buckets of ``service`` holding at least one of ``streams`` (a Stream queryset)."""
    rows = StreamBucket.objects.filter(service=service, stream__in=streams)
    return sorted(set(rows.values_list("bucket", flat=True)))


def acquire(service: str, bucket: int, lease_ms: int) -> str | None:
    """Take the lease of ``service``'s ``bucket`` for ``lease_ms``; the holder's id, or
    ``None`` while another holds it."""
    with contextlib.suppress(IntegrityError):  # created by a concurrent round meanwhile
        BucketLease.objects.get_or_create(service=service, bucket=bucket)
    holder = uuid.uuid4().hex
    now = now_ms()
    taken = BucketLease.objects.filter(service=service, bucket=bucket, expires_ms__lte=now).update(
        holder=holder, expires_ms=now + lease_ms
    )
    return holder if taken else None


def release(service: str, bucket: int, holder: str) -> None:
    BucketLease.objects.filter(service=service, bucket=bucket, holder=holder).update(
        expires_ms=0, holder=""
    )


def _in_bucket(service: str, bucket: int, streams: QuerySet[Stream]) -> QuerySet[Stream]:
    ids = StreamBucket.objects.filter(service=service, bucket=bucket).values_list(
        "stream_id", flat=True
    )
    return streams.select_related("scope").filter(pk__in=ids).order_by("pk")


@contextlib.contextmanager
def _holding(service: str, bucket: int, lease_ms: int) -> Iterator[bool]:
    """Whether the bucket's lease was taken; released on the way out."""
    if service not in BucketService.values:
        raise ValueError(f"no periodic service {service!r}")
    holder = acquire(service, bucket, lease_ms)
    if holder is None:
        yield False
        return
    try:
        yield True
    finally:
        release(service, bucket, holder)


def run_bucket(
    service: str,
    bucket: int,
    lease_ms: int,
    streams: QuerySet[Stream],
    visit: Callable[[Stream], object],
) -> int:
    """``visit(stream)`` for each of ``streams`` in ``bucket`` (by id), under the bucket's
    lease. Streams visited; -1 when another round holds the bucket."""
    with _holding(service, bucket, lease_ms) as held:
        if not held:
            return -1
        visited = 0
        for stream in _in_bucket(service, bucket, streams):
            try:
                visit(stream)
            except Exception:
                log.exception("%s of stream %s failed; the next round tries again", service, stream)
            visited += 1
        return visited


def run_bucket_at_once(
    service: str,
    bucket: int,
    lease_ms: int,
    streams: QuerySet[Stream],
    visit: Callable[[list[Stream]], object],
) -> int:
    """``visit(the streams of bucket)`` in one call (a round that batches its queries over
    them), under the bucket's lease. Streams visited; -1 when another round holds it."""
    with _holding(service, bucket, lease_ms) as held:
        if not held:
            return -1
        found = list(_in_bucket(service, bucket, streams))
        try:
            visit(found)
        except Exception:
            log.exception("%s of bucket %d failed; the next round tries again", service, bucket)
        return len(found)
