"""WebSocket routes of the tails (mounted by ``millrace.project.asgi``)."""

from typing import Any

from django.urls import path, re_path

from controller_app.tails.tail import SegmentTailConsumer, StreamTailConsumer


def websocket_urlpatterns() -> list[Any]:
    """The tail-read routes."""
    return [
        path("ws/streams/<str:scope>/<str:stream>", StreamTailConsumer.as_asgi()),
        re_path(r"^ws/segments/(?P<segment>[^?]+)$", SegmentTailConsumer.as_asgi()),
    ]
