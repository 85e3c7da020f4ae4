"""Key-value table: a scope's table of keys and values, stored in table segments."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from controller_app.choices import KVT_TRANSITIONS, KvtState
from controller_app.models.base import StatefulModel
from controller_app.models.scope import Scope
from millrace.kernel.kvt import KvtConfig, kvt_segment_name


class KeyValueTable(StatefulModel):
    """A key-value table: its configuration (Pravega's ``KeyValueTableConfiguration``) and
    state (compare-and-swap on ``version``). Its partitions are the table segments
    ``millrace.kernel.kvt.kvt_segment_name(scope, name, n)``."""

    TRANSITIONS = KVT_TRANSITIONS

    scope = models.ForeignKey(
        Scope, on_delete=models.PROTECT, related_name="kvtables", db_index=False
    )
    name = models.CharField(max_length=240)
    state = models.CharField(max_length=16, choices=KvtState.choices, default=KvtState.CREATING)
    partitions = models.IntegerField()
    primary_key_length = models.IntegerField()
    secondary_key_length = models.IntegerField(default=0)
    #: How keys are placed in partitions (``millrace.kernel.kvt.PLACEMENTS``); fixed at creation.
    placement = models.CharField(max_length=16, default="pravega")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["scope_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "name"], name="kvt_unique_name"),
            models.CheckConstraint(
                condition=Q(
                    partitions__gte=1, primary_key_length__gte=1, secondary_key_length__gte=0
                ),
                name="kvt_config_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.scoped_name if self.scope_id else self.name

    @property
    def scoped_name(self) -> str:
        return f"{self.scope.name}/{self.name}"

    @property
    def config(self) -> KvtConfig:
        return KvtConfig(self.partitions, self.primary_key_length, self.secondary_key_length,
                         self.placement)  # fmt: skip

    def segment_names(self) -> list[str]:
        return [kvt_segment_name(self.scope.name, self.name, n) for n in range(self.partitions)]
