"""The generation of the credentials: one row, bumped by every change to a user, an API token
or a group (and its permissions), in whichever process makes it.

What a process remembers of credentials it verified (the schema registry's lookup by id,
``controller_app.api.registry_shortcut``) is taken only while the generation is the one it
was verified under: one primary-key read tells a remembered verdict is still current, on every
controller of a cluster and after a change made by the command line.
"""

from __future__ import annotations

from django.db import models

#: The one row's key.
ROW = 1


class CredentialsGeneration(models.Model):
    id = models.PositiveSmallIntegerField(primary_key=True, default=ROW)
    generation = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"credentials generation {self.generation}"

    @classmethod
    def current(cls) -> int:
        found = cls.objects.filter(pk=ROW).values_list("generation", flat=True).first()
        return int(found or 0)

    @classmethod
    def bump(cls) -> None:
        if not cls.objects.filter(pk=ROW).update(generation=models.F("generation") + 1):
            cls.objects.get_or_create(pk=ROW, defaults={"generation": 1})
