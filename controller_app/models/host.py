"""The host store: nodes, segment containers, and which node owns which container.

A segment's container is the segment store's stable hash of its name modulo the container count
(``segment_app.engine.store.container_for``); ``ContainerAssignment`` then names the node whose
wire-protocol endpoint serves it. The count is fixed for the life of a cluster.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from controller_app.choices import NodeRole, SessionState


class Node(models.Model):
    """A Millrace process that registered itself: its id, role and wire-protocol endpoint."""

    node_id = models.CharField(max_length=255, unique=True)
    role = models.CharField(max_length=16, choices=NodeRole.choices, default=NodeRole.BOTH)
    host = models.CharField(max_length=255, help_text="Literal IP or host name clients reach.")
    port = models.IntegerField()
    metrics_port = models.IntegerField(
        null=True, blank=True, help_text="Its metrics endpoint (/metrics, /traffic); null: none."
    )
    tls = models.BooleanField(default=False, help_text="Its ports need TLS (tls://host:port).")
    grpc_port = models.IntegerField(
        null=True, blank=True, help_text="A controller's gRPC port (Pravega's clients); null: none."
    )
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    session = models.CharField(
        max_length=8, choices=SessionState.choices, default=SessionState.STATIC,
        help_text="static: never moved (standalone); live: renewing; left: stopped cleanly",
    )  # fmt: skip
    renewals = models.BigIntegerField(
        default=0, help_text="Grows at every renewal of the session: the leader watches it move."
    )
    started_at = models.DateTimeField(null=True, blank=True, help_text="When it last joined.")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(port__gte=0, port__lte=65535), name="node_port"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} ({self.address})"

    @property
    def address(self) -> str:
        """Where clients reach it: ``host:port``, ``tls://host:port`` when it needs TLS."""
        return f"{'tls://' if self.tls else ''}{self.host}:{self.port}"


class Container(models.Model):
    """One segment container (a shard of the segment store), numbered from 0."""

    number = models.IntegerField(unique=True)

    class Meta:
        ordering = ["number"]
        constraints = [
            models.CheckConstraint(condition=Q(number__gte=0), name="container_number"),
        ]

    def __str__(self) -> str:
        return f"container {self.number}"


class ContainerAssignment(models.Model):
    """The node that owns a container now. ``generation`` is the assignment's epoch: it takes
    the cluster's next epoch at every reassignment (``ClusterLease.epochs``), so it only grows,
    and the owner carries it into tier-1 and tier-2 as its fencing token."""

    container = models.OneToOneField(Container, on_delete=models.CASCADE, related_name="assignment")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="assignments")
    generation = models.BigIntegerField(default=0)
    assigned_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.container} → {self.node}"


class ProcessHeartbeat(models.Model):
    """The last sign of life of one Celery worker or beat process
    (``controller_app.operations.heartbeats``).

    Each process keeps its own row fresh (``beat_at``) while it works; the health check calls
    a role down when none of its rows is fresh. Rows of processes gone for long are deleted.
    """

    role = models.CharField(max_length=16, help_text="worker or beat")
    process = models.CharField(max_length=255, help_text="host name and process id")
    beat_at = models.DateTimeField()
    started_at = models.DateTimeField()
    metrics_address = models.CharField(
        max_length=300, blank=True, default="",
        help_text="host:port of its metrics port (/live, /ready, /metrics); empty: none",
    )  # fmt: skip

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["role", "process"], name="heartbeat_process"),
        ]
        indexes = [models.Index(fields=["role", "-beat_at"], name="heartbeat_latest")]

    def __str__(self) -> str:
        return f"{self.role} {self.process} at {self.beat_at}"


class TaskCount(models.Model):
    """How often a workflow task ended one way (``ok``, ``retry``, ``failed``), for metrics:
    the workers count here, where the controller's ``/metrics`` can read it."""

    task = models.CharField(max_length=64)
    outcome = models.CharField(max_length=8)
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "outcome"], name="task_count_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.task} {self.outcome}: {self.count}"


class ClusterLease(models.Model):
    """A lease one process of the cluster holds at a time, until ``expires_ms``: the
    ``assignment`` lease makes its holder the leader that assigns containers; the ``beat``
    lease lets one Celery beat tick. Taken when expired and renewed by conditional UPDATE
    (``controller_app.cluster.leases``); ``term`` grows at every new holder."""

    name = models.CharField(max_length=32, unique=True)
    holder = models.CharField(max_length=255, blank=True, default="")
    term = models.BigIntegerField(default=0)
    expires_ms = models.BigIntegerField(default=0, help_text="ms since the Unix epoch")
    epochs = models.BigIntegerField(
        default=0, help_text="The last assignment epoch given (the assignment lease only)."
    )

    def __str__(self) -> str:
        return f"{self.name} lease: {self.holder or 'nobody'} (term {self.term})"


class ContainerMove(models.Model):
    """One reassignment of a container, for ``millrace cluster status`` and the console."""

    container = models.IntegerField()
    from_node = models.CharField(max_length=255, blank=True, default="")
    to_node = models.CharField(max_length=255)
    epoch = models.BigIntegerField()
    reason = models.CharField(max_length=64)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"container {self.container}: {self.from_node or '-'} -> {self.to_node}"


class CanaryProbe(models.Model):
    """What the canary (``controller_app.operations.canary``) last saw of one segment store node: an
    event written through the client to a canary segment the node owns, then read back."""

    node = models.CharField(max_length=255, unique=True, help_text="the node's id (or address)")
    probed_at = models.DateTimeField()
    succeeded_at = models.DateTimeField(null=True, blank=True)
    ack_seconds = models.FloatField(null=True, blank=True, help_text="append to acknowledgement")
    read_seconds = models.FloatField(
        null=True, blank=True, help_text="append to the event read back (end to end)"
    )
    successes = models.BigIntegerField(default=0)
    failures = models.BigIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")

    def __str__(self) -> str:
        return f"canary of {self.node} at {self.probed_at}"
