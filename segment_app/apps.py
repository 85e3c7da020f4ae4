"""Django app of the segment store role: a thin adapter around ``segment_app.engine``.

The engine itself never imports Django; this app contributes the health endpoints
(``segment_app.views``) and, later, the Channels consumers of ``segment_app.server``.
"""

from django.apps import AppConfig


class SegmentAppConfig(AppConfig):
    name = "segment_app"
    verbose_name = "Segment store"
    default_auto_field = "django.db.models.BigAutoField"
