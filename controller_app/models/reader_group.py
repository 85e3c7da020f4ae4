"""Reader groups as the controller knows them, and their subscriptions to streams.

``ReaderGroup`` keeps the configuration a client registered (streams and their start/end cuts,
checkpoint settings, retention type), its ``generation`` (bumped on every reset), a
lifecycle state, and the readers' live state (members, segment assignments, positions,
checkpoints) as one document with its own compare-and-swap version (``sync_state``,
``state_version``; see ``controller_app.reader_group_state``). A reader group that opted in
to consumption-based retention has one ``Subscriber`` row per stream it reads, holding the
stream cut it reported: the retention job reads a stream's subscribers by the
``(stream, ...)`` index and truncates no further than their lowest cut. (Pravega keeps the
live state in a state-synchronizer segment; Millrace keeps it in the controller's database,
see docs/decisions/0003-reader-group-state-in-the-database.md.)
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from controller_app.choices import READER_GROUP_TRANSITIONS, ReaderGroupState
from controller_app.models.base import StatefulModel
from controller_app.models.scope import Scope
from controller_app.models.stream import Stream


class ReaderGroup(StatefulModel):
    """A reader group: configuration, generation, state."""

    TRANSITIONS = READER_GROUP_TRANSITIONS

    scope = models.ForeignKey(
        Scope, on_delete=models.PROTECT, related_name="reader_groups", db_index=False
    )
    name = models.CharField(max_length=255)
    reader_group_id = models.UUIDField(default=uuid.uuid4, unique=True)
    configuration = models.JSONField(default=dict, blank=True)
    generation = models.BigIntegerField(default=0)
    sync_state = models.JSONField(
        default=dict,
        blank=True,
        help_text="Readers, segment assignments, positions, checkpoints.",
    )
    state_version = models.BigIntegerField(
        default=0, help_text="Bumped by every change of sync_state; compare-and-swap key."
    )
    state = models.CharField(
        max_length=16, choices=ReaderGroupState.choices, default=ReaderGroupState.CREATING
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["scope_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "name"], name="reader_group_unique"),
            models.CheckConstraint(condition=Q(generation__gte=0), name="reader_group_generation"),
        ]

    def __str__(self) -> str:
        return self.name


class Subscriber(models.Model):
    """A reader group's subscription to one stream, with the stream cut it last reported."""

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="subscribers", db_index=False
    )
    reader_group = models.ForeignKey(
        ReaderGroup, on_delete=models.CASCADE, related_name="subscriptions"
    )
    generation = models.BigIntegerField(help_text="Reader group generation of the report.")
    stream_cut = models.JSONField(
        default=dict, blank=True, help_text='{"<segment id>": offset, ...}'
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["stream", "reader_group"], name="subscriber_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.reader_group_id} on {self.stream_id}"


class ReaderGroupLag(models.Model):
    """The group's lag as the last lag round measured it (``controller_app.lag``): the report
    shown by REST, the CLI, the console and the metrics, the samples its status is judged
    over, and each segment's recent lengths (what a position's age is read from)."""

    group = models.OneToOneField(ReaderGroup, on_delete=models.CASCADE, related_name="lag")
    computed_at_ms = models.BigIntegerField(default=0)
    status = models.CharField(max_length=8, default="OK")
    report = models.JSONField(default=dict, blank=True)
    samples = models.JSONField(default=list, blank=True)
    tails = models.JSONField(
        default=dict, blank=True, help_text='{"<segment key>": [[ms, length], ...]}'
    )

    def __str__(self) -> str:
        return f"lag of {self.group}: {self.status}"
