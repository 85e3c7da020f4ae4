"""The schema registry: schemas by global id, subjects' versions of them, settings.

Confluent's Schema Registry model (``controller_app.registry`` serves its REST API):

* ``RegistrySchema``: one schema text of one type with its references, known by a global id
  that never changes and is never reused (the id in the 5-byte header events carry); the same
  schema registered under two subjects is one row, one id;
* ``SubjectVersion``: version ``n`` of a subject is a schema; a soft-deleted version keeps its
  row (``deleted``) until a permanent delete removes it;
* ``RegistrySetting``: the compatibility level and mode, for the whole registry (``subject``
  '') or one subject.
"""

from __future__ import annotations

from django.db import models


class RegistrySchema(models.Model):
    """A schema (its text as stored and answered, its type, its references)."""

    class Type(models.TextChoices):
        AVRO = "AVRO"
        JSON = "JSON"
        PROTOBUF = "PROTOBUF"

    schema_type = models.CharField(max_length=16, choices=Type.choices)
    text = models.TextField()
    #: ``[{"name": ..., "subject": ..., "version": n}, ...]`` as registered.
    references = models.JSONField(default=list, blank=True)
    #: What makes two registrations the same schema: a hash of its type, normal form and
    #: references.
    fingerprint = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"schema {self.pk} ({self.schema_type})"


class SubjectVersion(models.Model):
    """Version ``version`` of ``subject``."""

    subject = models.CharField(max_length=255)
    version = models.IntegerField()
    schema = models.ForeignKey(RegistrySchema, on_delete=models.PROTECT, related_name="versions")
    deleted = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["subject", "version"]
        constraints = [
            models.UniqueConstraint(fields=["subject", "version"], name="subject_version_unique"),
        ]
        indexes = [models.Index(fields=["schema"], name="subject_version_schema")]

    def __str__(self) -> str:
        return f"{self.subject} v{self.version}"


class RegistrySetting(models.Model):
    """The compatibility level and the mode of one subject, or of the registry (``subject``
    ''); ``None``: not set here (a subject then follows the registry's)."""

    subject = models.CharField(max_length=255, unique=True)
    compatibility = models.CharField(max_length=32, null=True, blank=True)
    mode = models.CharField(max_length=16, null=True, blank=True)

    def __str__(self) -> str:
        return f"registry settings of {self.subject or '(global)'}"
