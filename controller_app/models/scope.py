"""Scope: the namespace of streams and reader groups."""

from __future__ import annotations

from django.db import models


class Scope(models.Model):
    """A namespace; deleted only when empty (the workflow checks, the FK protects)."""

    name = models.CharField(max_length=255, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
