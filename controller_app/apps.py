"""Django app of the controller role."""

from django.apps import AppConfig


class ControllerAppConfig(AppConfig):
    name = "controller_app"
    verbose_name = "Controller"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        import controller_app.access.signin  # noqa: F401 - its receivers audit sign-in refusals
        from controller_app.access.roles import ensure_roles
        from controller_app.beat import connect_worker_heartbeat
        from controller_app.operations import tracing

        post_migrate.connect(ensure_roles, sender=self)
        connect_worker_heartbeat()
        tracing.connect()
        _forget_credentials_on_changes()


def _forget_credentials_on_changes() -> None:
    """Any change to a user, a token, a group or a grant (or a user's groups or permissions)
    bumps the credentials' generation: what the registry's lookup by id remembers of credentials is
    then judged by Django again (``controller_app.api.registry_shortcut``)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db.models.signals import m2m_changed, post_delete, post_save
    from rest_framework.authtoken.models import Token

    from controller_app.api.registry_shortcut import changed
    from controller_app.models import Grant

    user = get_user_model()
    for model in (user, Token, Group, Grant):
        post_save.connect(changed, sender=model, dispatch_uid=f"registry-shortcut-save-{model}")
        post_delete.connect(changed, sender=model, dispatch_uid=f"registry-shortcut-del-{model}")
    for through in (user.groups.through, user.user_permissions.through, Group.permissions.through):
        m2m_changed.connect(changed, sender=through, dispatch_uid=f"registry-shortcut-{through}")
