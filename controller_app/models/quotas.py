"""Quotas per scope (a team's scope is its tenant), and what each segment store node measured
of the scopes it serves (``controller_app.quotas``).

``ScopeQuota``: the scope's limits, each optional (null: none). Rates (append bytes and events
per second, read bytes per second) hold across the whole cluster and are enforced by delaying
acknowledgements and reads, never by failing them; stored bytes apply ``stored_policy`` at the
limit (refuse new appends, or truncate the oldest data as retention does); counts (streams,
segments, reader groups, tables) refuse a create past them.

``QuotaUsage``: one row per node and scope with a quota, written by that node every second: the
rates it saw last second, the throttle time it added since it started, and the share of each
rate quota it took (the node's allowance). The allowances of the nodes add up to the quota.
"""

from __future__ import annotations

from django.db import models


class ScopeQuota(models.Model):
    class StoredPolicy(models.TextChoices):
        REFUSE = "refuse", "refuse new appends"
        TRUNCATE = "truncate", "truncate the oldest data"

    scope = models.OneToOneField("controller_app.Scope", on_delete=models.CASCADE,
                                 related_name="quota")  # fmt: skip
    append_bytes_per_s = models.BigIntegerField(null=True, blank=True)
    append_events_per_s = models.BigIntegerField(null=True, blank=True)
    read_bytes_per_s = models.BigIntegerField(null=True, blank=True)
    stored_bytes = models.BigIntegerField(null=True, blank=True)
    stored_policy = models.CharField(max_length=16, choices=StoredPolicy.choices,
                                     default=StoredPolicy.REFUSE)  # fmt: skip
    streams = models.IntegerField(null=True, blank=True)
    segments = models.IntegerField(null=True, blank=True)
    reader_groups = models.IntegerField(null=True, blank=True)
    tables = models.IntegerField(null=True, blank=True)
    #: The scope's stored bytes as the last quota round measured them, and when.
    stored_bytes_used = models.BigIntegerField(default=0)
    measured_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"quota of {self.scope_id}"


class QuotaUsage(models.Model):
    node = models.CharField(max_length=128)
    scope = models.CharField(max_length=250)
    append_bytes_per_s = models.FloatField(default=0.0)
    append_events_per_s = models.FloatField(default=0.0)
    read_bytes_per_s = models.FloatField(default=0.0)
    #: Seconds of delay this node added to the scope's acknowledgements and reads (a counter).
    throttle_seconds = models.FloatField(default=0.0)
    allowance_append_bytes = models.FloatField(null=True, blank=True)
    at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "scope"], name="usage_once")]

    def __str__(self) -> str:
        return f"{self.scope} on {self.node}"
