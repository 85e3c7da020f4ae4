"""ASGI entry point of a Millrace node: Django for HTTP, Channels for WebSockets.

``websocket_urlpatterns`` is where the Channels consumers (tail reads, console feeds) are routed;
it is empty until they exist, so every WebSocket connection is refused for now.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.settings")

# Django must be set up (by get_asgi_application) before anything imports models or consumers.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

websocket_urlpatterns: list = []

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
