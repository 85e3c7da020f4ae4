"""The Django project of a Millrace node: settings, URLs, the ASGI and WSGI entry points, the
Celery application and its broker. It wires the roles (``controller_app``, ``admin_ui``)
together; no role imports it. Importing it loads the Celery app (``celery_app``), as Celery's
Django guide does, so that every Django process sends tasks through Millrace's broker.

Its other modules:

* ``asgi``: ASGI entry point of a Millrace node
* ``urls``: root URL configuration
* ``wsgi``: WSGI entry point (plain HTTP only
"""

from millrace.project.celery import app as celery_app

__all__ = ["celery_app"]
