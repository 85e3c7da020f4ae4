"""The host store: nodes, segment containers, and which node owns which container.

A segment's container is the segment store's stable hash of its name modulo the container count
(``segment_app.engine.store.container_for``); ``ContainerAssignment`` then names the node whose
wire-protocol endpoint serves it. The count is fixed for the life of a cluster.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from controller_app.choices import NodeRole


class Node(models.Model):
    """A Millrace process that registered itself: its id, role and wire-protocol endpoint."""

    node_id = models.CharField(max_length=255, unique=True)
    role = models.CharField(max_length=16, choices=NodeRole.choices, default=NodeRole.BOTH)
    host = models.CharField(max_length=255, help_text="Literal IP or host name clients reach.")
    port = models.IntegerField()
    metrics_port = models.IntegerField(
        null=True, blank=True, help_text="Its metrics endpoint (/metrics, /traffic); null: none."
    )
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(port__gte=0, port__lte=65535), name="node_port"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} ({self.host}:{self.port})"


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
    """The node that owns a container now; ``generation`` grows at every reassignment."""

    container = models.OneToOneField(Container, on_delete=models.CASCADE, related_name="assignment")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="assignments")
    generation = models.BigIntegerField(default=0)
    assigned_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.container} → {self.node}"


class ProcessHeartbeat(models.Model):
    """The last sign of life of one Celery worker or beat process (``controller_app.heartbeats``).

    Each process keeps its own row fresh (``beat_at``) while it works; the health check calls
    a role down when none of its rows is fresh. Rows of processes gone for long are deleted.
    """

    role = models.CharField(max_length=16, help_text="worker or beat")
    process = models.CharField(max_length=255, help_text="host name and process id")
    beat_at = models.DateTimeField()
    started_at = models.DateTimeField()

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
