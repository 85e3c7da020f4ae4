"""Quotas per scope (``models.ScopeQuota``): set, shown with their use, and enforced.

* **Rates** (append bytes and events per second, read bytes per second) hold across the whole
  cluster. Every segment store node trades once a second what it measured of each scope for its
  share of the scope's quotas (``DatabaseQuotas.exchange``, ``millrace.kernel.quotas.share``)
  and lets the scope through at that share by delaying its acknowledgements and reads
  (``segment_app.server.quotas``), never by failing them. Making more streams does not raise a
  scope's total: the quota is the scope's, whatever its streams and nodes.
* **Stored bytes**, measured every ``MILLRACE_QUOTA_PERIOD_S`` by the beat job
  (``stored_round``): with ``refuse`` the nodes refuse the scope's appends while it is at its
  limit (retriable: writers send them again until the delivery timeout, the error says why);
  with ``truncate`` its streams are truncated, oldest data first, as retention does.
* **Counts** (streams, segments, reader groups, tables): a create past them is refused
  (``QuotaExceededError``, 409 ``quota-exceeded``) by the workflows
  (``controller_app.workflows.room``), so on every face.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from django.db import close_old_connections
from django.db.models import Sum
from django.utils import timezone

from controller_app import audit
from controller_app import selectors as sel
from controller_app.errors import ControllerError, InvalidArgumentError
from controller_app.models import QuotaUsage, Scope, ScopeQuota, Stream, StreamCutRecord
from controller_app.ports import SegmentStorePort
from controller_app.segments import CutOrder
from controller_app.workflows.room import counts
from millrace.kernel.quotas import QUOTA_LIMITS, Allowance, Demand, limit_value, share

log = logging.getLogger(__name__)

#: A node's usage row counts this long after it was written.
FRESH_SECONDS = 5.0
#: The limits' names, and their REST API names (``millrace.kernel.quotas.QUOTA_LIMITS``).
LIMITS = tuple(limit.name for limit in QUOTA_LIMITS)
API_NAMES = {limit.name: limit.field for limit in QUOTA_LIMITS}


# -- setting and showing ----------------------------------------------------------------------


def set_quota(scope: str, limits: Mapping[str, Any], stored_policy: str | None = None) -> None:
    """Set the limits named in ``limits`` (None removes one) of ``scope``; a scope with no limit
    left has no quota."""
    row = sel.scope_named(scope)
    if row is None:
        from controller_app.errors import ScopeNotFoundError

        raise ScopeNotFoundError(f"scope {scope} does not exist")
    unknown = sorted(set(limits) - set(LIMITS))
    if unknown:
        raise InvalidArgumentError(f"unknown limits {unknown}; known: {list(LIMITS)}")
    for name, value in limits.items():
        try:
            limit_value(API_NAMES[name], value)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
    quota, _ = ScopeQuota.objects.get_or_create(scope=row)
    for name, value in limits.items():
        setattr(quota, name, value)
    if stored_policy is not None:
        if stored_policy not in ScopeQuota.StoredPolicy.values:
            raise InvalidArgumentError("the stored-bytes policy is refuse or truncate")
        quota.stored_policy = stored_policy
    if all(getattr(quota, name) is None for name in LIMITS):
        quota.delete()
        return
    quota.save()


def quota_of(scope: Scope) -> dict[str, Any]:
    """The scope's limits, its use of each, and the throttle time its nodes added."""
    quota = ScopeQuota.objects.filter(scope=scope).first()
    fresh = timezone.now() - dt.timedelta(seconds=FRESH_SECONDS)
    usage = QuotaUsage.objects.filter(scope=scope.name)
    rates = usage.filter(at__gte=fresh).aggregate(
        b=Sum("append_bytes_per_s"), e=Sum("append_events_per_s"), r=Sum("read_bytes_per_s")
    )
    used = {
        "append_bytes_per_s": rates["b"] or 0.0,
        "append_events_per_s": rates["e"] or 0.0,
        "read_bytes_per_s": rates["r"] or 0.0,
        "stored_bytes": quota.stored_bytes_used if quota is not None else None,
        **counts(scope),
    }
    return {
        "scopeName": scope.name,
        "limits": {API_NAMES[n]: getattr(quota, n) if quota else None for n in LIMITS},
        "used": {API_NAMES[n]: used[n] for n in LIMITS},
        "storedPolicy": quota.stored_policy if quota else ScopeQuota.StoredPolicy.REFUSE,
        "storedMeasuredAt": quota.measured_at.isoformat() if quota and quota.measured_at else None,
        "throttleSeconds": usage.aggregate(t=Sum("throttle_seconds"))["t"] or 0.0,
    }


# -- the nodes' exchange ----------------------------------------------------------------------


class DatabaseQuotas:
    """A segment store node's ``QuotaSource``: its usage written, its allowances computed from
    the quotas and the other nodes' fresh usage (blocking; run in a thread)."""

    def exchange(self, node: str, demand: Mapping[str, Demand]) -> Mapping[str, Allowance]:
        close_old_connections()
        quotas = {q.scope.name: q for q in ScopeQuota.objects.select_related("scope")}
        if not quotas:
            return {}
        now = timezone.now()
        rows = [
            QuotaUsage(node=node, scope=scope, append_bytes_per_s=d.append_bytes,
                       append_events_per_s=d.append_events, read_bytes_per_s=d.read_bytes,
                       throttle_seconds=d.throttle_seconds, at=now)
            for scope, d in demand.items() if scope in quotas
        ]  # fmt: skip
        if rows:
            QuotaUsage.objects.bulk_create(
                rows, update_conflicts=True, unique_fields=["node", "scope"],
                update_fields=["append_bytes_per_s", "append_events_per_s", "read_bytes_per_s",
                               "throttle_seconds", "at"],
            )  # fmt: skip
        fresh = now - dt.timedelta(seconds=FRESH_SECONDS)
        others: dict[str, list[QuotaUsage]] = defaultdict(list)
        for row in QuotaUsage.objects.filter(scope__in=quotas, at__gte=fresh).exclude(node=node):
            others[row.scope].append(row)
        return {
            scope: allowance(quota, demand.get(scope, Demand()), others[scope])
            for scope, quota in quotas.items()
        }


def allowance(quota: ScopeQuota, mine: Demand, others: list[QuotaUsage]) -> Allowance:
    """This node's share of each rate quota, and the refusal of a full scope."""

    def part(limit: int | None, used: float, field: str) -> float | None:
        if limit is None:
            return None
        return share(limit, used, [getattr(row, field) for row in others])

    refusal = None
    if (
        quota.stored_bytes is not None
        and quota.stored_policy == ScopeQuota.StoredPolicy.REFUSE
        and quota.stored_bytes_used >= quota.stored_bytes
    ):
        refusal = (
            f"scope {quota.scope.name} is at its stored-bytes quota ({quota.stored_bytes_used} "
            f"of {quota.stored_bytes} bytes): its appends wait until data is truncated or the "
            "quota is raised"
        )
    return Allowance(
        append_bytes=part(quota.append_bytes_per_s, mine.append_bytes, "append_bytes_per_s"),
        append_events=part(quota.append_events_per_s, mine.append_events, "append_events_per_s"),
        read_bytes=part(quota.read_bytes_per_s, mine.read_bytes, "read_bytes_per_s"),
        refusal=refusal,
    )


# -- stored bytes -----------------------------------------------------------------------------


def stored_bytes(store: SegmentStorePort, stream: Stream) -> int:
    """The bytes ``stream`` holds: from its head to its tail."""
    from controller_app.stream_reads import tail_cut

    tail = {s.id: offset for s, offset in tail_cut(store, stream).items()}
    head = {s.id: offset for s, offset in sel.head_segments(stream).items()}
    return max(0, sel.size_till_stream_cut(stream, tail) - sel.size_till_stream_cut(stream, head))


@dataclasses.dataclass
class _Measured:
    stream: Stream
    size: int


def stored_round(store: SegmentStorePort) -> dict[str, int]:
    """Measure the stored bytes of every scope with a stored-bytes quota; truncate those over it
    whose policy says so. {scope: stored bytes}."""
    found = {}
    for quota in ScopeQuota.objects.filter(stored_bytes__isnull=False).select_related("scope"):
        try:
            measured = [_Measured(s, stored_bytes(store, s)) for s in sel.streams_in(quota.scope)]
        except Exception:  # a node away: measured next round
            log.warning("the stored bytes of scope %s are not measured", quota.scope.name,
                        exc_info=True)  # fmt: skip
            continue
        total, limit = sum(m.size for m in measured), quota.stored_bytes or 0
        if quota.stored_policy == ScopeQuota.StoredPolicy.TRUNCATE and total > limit:
            _truncate_oldest(store, measured, total - limit)
            total = sum(stored_bytes(store, m.stream) for m in measured)
        ScopeQuota.objects.filter(pk=quota.pk).update(stored_bytes_used=total,
                                                      measured_at=timezone.now())  # fmt: skip
        found[quota.scope.name] = total
    return found


def _truncate_oldest(store: SegmentStorePort, measured: list[_Measured], excess: int) -> None:
    """Truncate each stream by its part of ``excess`` (in proportion to its size), at the newest
    of its retention records (one is collected each round the scope is over) that frees as
    much, as retention truncates (the worker carries it out); audited as ``system:quota``."""
    from controller_app.workflows.common import now_ms
    from controller_app.workflows.retention import collect_cut, forget_behind
    from controller_app.workflows.truncate import truncate_stream

    total = sum(m.size for m in measured) or 1
    for m in measured:
        want = excess * m.size // total
        if want <= 0:
            continue
        latest = collect_cut(store, m.stream, now_ms(), 0)  # (the tail, as a record)
        if latest is None:
            continue
        keep = m.size - want  # the newest record leaving at least that much behind it
        chosen = (
            StreamCutRecord.objects.filter(
                stream=m.stream, recording_size__lte=latest.recording_size - keep
            )
            .order_by("-recording_size")
            .first()
        )
        head = {s.id: o for s, o in sel.head_segments(m.stream).items()}
        if chosen is None or sel.compare_stream_cuts(m.stream, head, chosen.cut_ids()) != (
            CutOrder.BEFORE
        ):
            continue
        try:
            truncate_stream(store, m.stream.scope.name, m.stream.name, chosen.cut_ids(), wait=None)
        except ControllerError as exc:
            log.warning("quota truncation of %s waits: %s", m.stream.scoped_name, exc)
            continue
        audit.record(
            "stream.truncate", m.stream.scoped_name, username="system:quota", source="workflow",
            detail=f"stored-bytes quota of scope {m.stream.scope.name}",
        )  # fmt: skip
        forget_behind(m.stream, chosen.cut_ids())  # (as retention does: the records stay few)
