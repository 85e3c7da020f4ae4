"""WSGI entry point (plain HTTP only; WebSockets need the ASGI app in ``millrace.project.asgi``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.project.settings")

application = get_wsgi_application()
