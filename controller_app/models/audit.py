"""The audit log: one row per change asked of Millrace, allowed or refused.

Rows are written by ``controller_app.audit`` (REST and console requests through its
middleware, the local CLI commands and the background workflows); nothing updates them.
``username`` is text, not a key, so that a row outlives its user.
"""

from __future__ import annotations

from django.db import models


class AuditEntry(models.Model):
    """Who asked for what, when, from where, and what came of it."""

    class Source(models.TextChoices):
        CONSOLE = "console"
        REST = "rest"
        CLI = "cli"
        GRPC = "grpc"
        WEBSOCKET = "websocket"
        WORKFLOW = "workflow"

    class Result(models.TextChoices):
        OK = "ok"
        REFUSED = "refused"
        FAILED = "failed"
        #: A create of what exists already (409): asked again, nothing changed, nothing wrong.
        UNCHANGED = "unchanged"

    at = models.DateTimeField(auto_now_add=True)
    username = models.CharField(max_length=150, help_text="'' when the caller was not known")
    source = models.CharField(max_length=16, choices=Source.choices)
    address = models.CharField(max_length=64, blank=True, default="", help_text="client address")
    action = models.CharField(max_length=64, help_text="e.g. stream.scale")
    object = models.CharField(max_length=512, blank=True, default="", help_text="scope/stream...")
    result = models.CharField(max_length=16, choices=Result.choices)
    detail = models.TextField(blank=True, default="", help_text="the error, when not ok")

    class Meta:
        indexes = [
            models.Index(fields=["at"], name="audit_at"),
            models.Index(fields=["username", "at"], name="audit_user_at"),
            models.Index(fields=["object", "at"], name="audit_object_at"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.username or '-'} {self.action} {self.object}"
