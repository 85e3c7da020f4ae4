"""Stream transactions: open and in-flight ones, and the record left when one completes.

A transaction id is 128 bits, ``(high_bits, low_bits)``: ``high_bits`` = ``(epoch << 32)`` |
the upper 32 bits of a counter, ``low_bits`` = its lower 64 bits and never negative (the
official client sign-extends it). ``commit_order`` numbers the commits of a stream in the order
they were requested; the commit workflow takes the COMMITTING ones of the lowest epoch in that
order. The lease (pings push it forward) and the max execution deadline bound an OPEN
transaction's life; a sweeper aborts the expired ones by ``(state, lease_expires_at)``.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from controller_app.choices import TXN_COMPLETED, TXN_TRANSITIONS, TxnState
from controller_app.models.base import StatefulModel
from controller_app.models.stream import Stream

_LOW_BITS_MASK = (1 << 64) - 1


class Transaction(StatefulModel):
    """An open, committing or aborting transaction of a stream."""

    TRANSITIONS = TXN_TRANSITIONS

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="transactions", db_index=False
    )
    high_bits = models.BigIntegerField()
    low_bits = models.BigIntegerField()
    epoch = models.IntegerField(help_text="The epoch it was created in (high_bits >> 32).")
    state = models.CharField(max_length=16, choices=TxnState.choices, default=TxnState.OPEN)
    writer_id = models.CharField(max_length=64, blank=True, default="")
    lease_expires_at = models.DateTimeField()
    max_execution_deadline = models.DateTimeField()
    commit_order = models.BigIntegerField(null=True, blank=True)
    commit_timestamp = models.BigIntegerField(
        null=True, blank=True, help_text="The writer's time for watermarks, ms."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["stream", "high_bits", "low_bits"], name="transaction_unique"
            ),
            models.CheckConstraint(condition=Q(low_bits__gte=0), name="transaction_low_bits"),
            models.CheckConstraint(condition=Q(epoch__gte=0), name="transaction_epoch"),
            models.UniqueConstraint(
                fields=["stream", "commit_order"],
                condition=Q(commit_order__isnull=False),
                name="transaction_commit_order_unique",
            ),
        ]
        indexes = [
            models.Index(
                fields=["stream", "state", "epoch", "commit_order"], name="transaction_commits"
            ),
            models.Index(fields=["state", "lease_expires_at"], name="transaction_leases"),
        ]

    def __str__(self) -> str:
        return self.hex

    @property
    def txn_id(self) -> int:
        """The 128-bit id."""
        return ((self.high_bits & _LOW_BITS_MASK) << 64) | (self.low_bits & _LOW_BITS_MASK)

    @property
    def hex(self) -> str:
        """32 lowercase hex digits, as transaction segment names carry it."""
        return f"{self.txn_id:032x}"


class CompletedTransaction(models.Model):
    """A transaction that committed or aborted, kept for a while so late calls get an answer."""

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="completed_transactions", db_index=False
    )
    high_bits = models.BigIntegerField()
    low_bits = models.BigIntegerField()
    state = models.CharField(
        max_length=16, choices=[(s.value, s.label) for s in TxnState if s in TXN_COMPLETED]
    )
    completed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["stream", "high_bits", "low_bits"], name="completed_transaction_unique"
            ),
            models.CheckConstraint(
                condition=Q(state__in=sorted(TXN_COMPLETED)), name="completed_transaction_state"
            ),
        ]
        indexes = [models.Index(fields=["completed_at"], name="completed_transaction_age")]

    def __str__(self) -> str:
        high, low = self.high_bits & _LOW_BITS_MASK, self.low_bits & _LOW_BITS_MASK
        return f"{high:016x}{low:016x} {self.state}"
