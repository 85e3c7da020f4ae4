"""Django app of the segment store role: a thin adapter around ``segment_app.engine``.

The engine itself never imports Django; this app contributes the Channels consumers of the
WebSocket tail reads (``segment_app.consumers``).
"""

from django.apps import AppConfig


class SegmentAppConfig(AppConfig):
    name = "segment_app"
    verbose_name = "Segment store"
    default_auto_field = "django.db.models.BigAutoField"
