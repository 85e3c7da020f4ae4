"""Django app of the controller role."""

from django.apps import AppConfig


class ControllerAppConfig(AppConfig):
    name = "controller_app"
    verbose_name = "Controller"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Tasks must be sent through Millrace's Celery app (its broker), not Celery's default.
        import millrace.celery  # noqa: F401
