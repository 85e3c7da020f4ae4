"""Django app of the controller role."""

from django.apps import AppConfig


class ControllerAppConfig(AppConfig):
    name = "controller_app"
    verbose_name = "Controller"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        import controller_app.signin  # noqa: F401 - its receivers audit sign-in refusals
        from controller_app.beat import connect_worker_heartbeat
        from controller_app.roles import ensure_roles

        post_migrate.connect(ensure_roles, sender=self)
        connect_worker_heartbeat()
