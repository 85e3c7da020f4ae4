"""The Django project of a Millrace node: settings, URLs, the ASGI and WSGI entry points, the
Celery application and its broker. It wires the roles (``controller_app``, ``admin_ui``)
together; no role imports it (except the controller's app, which binds its tasks to the
Celery app when Django starts)."""
