"""The schema registry's media type and its JSON renderer, as Confluent's clients expect them.

Responsibility: one spelling of ``application/vnd.schemaregistry.v1+json`` and the renderer that
answers with it, for the registry's views (``registry``) and its lookup by id in front of Django
(``registry_shortcut``).
"""

from __future__ import annotations

from rest_framework import renderers

__all__ = ["MEDIA_TYPE", "RegistryRenderer"]

#: The media type of Confluent's Schema Registry API (requests and replies).
MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryRenderer(renderers.JSONRenderer):
    media_type = MEDIA_TYPE
