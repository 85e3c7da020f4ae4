"""Django app of the controller role."""

from django.apps import AppConfig


class ControllerAppConfig(AppConfig):
    name = "controller_app"
    verbose_name = "Controller"
    default_auto_field = "django.db.models.BigAutoField"
