"""Grants: a permission on Pravega's resource strings, given to a user or a group, or denied.

A row says that ``user`` (or every member of ``group``) may, or with ``deny`` may not, do what
``permission`` names on each resource its ``resource`` pattern matches (``prn::/scope:S``,
``prn::/scope:S/stream:T``, ``prn::/scope:team-a*``). ``controller_app.access.grants`` judges calls
by them; a user with no allowing grant keeps the default of its role.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Grant(models.Model):
    """One permission on the resources a pattern matches, for a user or a group."""

    class Permission(models.TextChoices):
        READ = "READ"
        READ_UPDATE = "READ_UPDATE"
        MANAGE = "MANAGE"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
        related_name="grants",
    )  # fmt: skip
    group = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="grants"
    )
    resource = models.CharField(max_length=512, help_text="a resource string or pattern (prn::)")
    permission = models.CharField(max_length=16, choices=Permission.choices)
    deny = models.BooleanField(default=False, help_text="refuses instead of allowing")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, group__isnull=True)
                | models.Q(user__isnull=True, group__isnull=False),
                name="grant_user_or_group",
            ),
            models.UniqueConstraint(
                fields=["user", "group", "resource", "deny"], name="grant_once"
            ),
        ]

    @property
    def principal(self) -> str:
        """``user:alice`` or ``group:team-a``."""
        if self.user is not None:
            return f"user:{self.user.get_username()}"
        assert self.group is not None  # (a grant names a user or a group: its check constraint)
        return f"group:{self.group.name}"

    def __str__(self) -> str:
        verb = "deny" if self.deny else "allow"
        return f"{verb} {self.principal} {self.permission} on {self.resource}"
