"""ASGI entry point of a Millrace node: Django for HTTP, Channels for WebSockets.

WebSockets: the tail reads of ``controller_app.tails.routing``, behind the origin check
(``controller_app.tails.auth.OriginCheck``: a foreign browser origin is refused at the
handshake with its reason; a program without an ``Origin`` authenticates with a token) and
authentication by session or API token. The consumers ask the controller about streams
directly (``controller_app.tails.streams``).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.project.settings")

# Django must be set up (by get_asgi_application) before anything imports models or consumers.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from controller_app.api.registry_shortcut import RegistryShortcut  # noqa: E402
from controller_app.tails.auth import TokenAuthMiddleware, origin_check  # noqa: E402
from controller_app.tails.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # the schema registry's lookup by id, for a credential Django allowed lately, answered
        # in front of Django (ADR 0015); everything else is Django's
        "http": RegistryShortcut(django_asgi_app),
        "websocket": origin_check(
            AuthMiddlewareStack(TokenAuthMiddleware(URLRouter(websocket_urlpatterns())))
        ),
    }
)
