"""WebSocket routes of the segment store role (mounted by ``millrace.project.asgi``)."""

from typing import Any

from django.urls import path, re_path

from controller_app.tails.directory import StreamDirectory
from controller_app.tails.tail import SegmentTailConsumer, StreamTailConsumer


def websocket_urlpatterns(directory: StreamDirectory) -> list[Any]:
    """The tail-read routes, their consumers asking ``directory`` about streams."""
    return [
        path(
            "ws/streams/<str:scope>/<str:stream>", StreamTailConsumer.as_asgi(directory=directory)
        ),
        re_path(
            r"^ws/segments/(?P<segment>[^?]+)$", SegmentTailConsumer.as_asgi(directory=directory)
        ),
    ]
