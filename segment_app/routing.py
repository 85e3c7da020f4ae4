"""WebSocket routes of the segment store role (mounted by ``millrace.asgi``)."""

from django.urls import path, re_path

from segment_app.consumers.tail import SegmentTailConsumer, StreamTailConsumer

websocket_urlpatterns = [
    path("ws/streams/<str:scope>/<str:stream>", StreamTailConsumer.as_asgi()),
    re_path(r"^ws/segments/(?P<segment>[^?]+)$", SegmentTailConsumer.as_asgi()),
]
