"""Django app of the browser admin console."""

from django.apps import AppConfig


class AdminUiConfig(AppConfig):
    name = "admin_ui"
    verbose_name = "Admin console"
    default_auto_field = "django.db.models.BigAutoField"
