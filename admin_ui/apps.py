"""Django app of the browser admin console (empty shell for now)."""

from django.apps import AppConfig


class AdminUiConfig(AppConfig):
    name = "admin_ui"
    verbose_name = "Admin console"
    default_auto_field = "django.db.models.BigAutoField"
