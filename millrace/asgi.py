"""ASGI entry point of a Millrace node: Django for HTTP, Channels for WebSockets.

WebSockets: the tail reads of ``segment_app.routing``, behind the origin check
(``segment_app.consumers.auth.OriginCheck``: a foreign browser origin is refused at the
handshake with its reason; a program without an ``Origin`` authenticates with a token) and
authentication by session or API token. The consumers learn about streams from the controller
through ``ControllerStreamDirectory`` (ADR 0004), wired in here.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.settings")

# Django must be set up (by get_asgi_application) before anything imports models or consumers.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from controller_app.stream_directory import ControllerStreamDirectory  # noqa: E402
from segment_app.consumers.auth import TokenAuthMiddleware, origin_check  # noqa: E402
from segment_app.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": origin_check(
            AuthMiddlewareStack(
                TokenAuthMiddleware(URLRouter(websocket_urlpatterns(ControllerStreamDirectory())))
            )
        ),
    }
)
