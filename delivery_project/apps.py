from django.apps import AppConfig, apps
from django.db.models.signals import post_migrate


def _roles_after_migrate(sender, using="default", **kwargs):
    from delivery_project.roles import create_roles

    if using == "default":
        create_roles()


class DeliveryProjectConfig(AppConfig):
    """The deployable itself: wiring and the commands that run the whole system."""

    name = "delivery_project"
    verbose_name = "Drone delivery"

    def ready(self):
        from delivery_project.tracing import configure_tracing

        configure_tracing()
        # This app has no models, so no post_migrate of its own: follow auth's, once per migrate.
        auth = apps.get_app_config("auth")
        post_migrate.connect(_roles_after_migrate, sender=auth, dispatch_uid="delivery_project.roles")
