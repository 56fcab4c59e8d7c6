from django.apps import AppConfig

from outbox.core.conf import fill_in_defaults


class OutboxConfig(AppConfig):
    """The messaging kernel every bounded context uses."""

    name = "outbox"
    verbose_name = "Messaging (outbox, inbox, dead letters)"
    default_auto_field = "django.db.models.BigAutoField"  # what its migrations made, whatever the project's default

    def __init__(self, app_name, app_module):
        super().__init__(app_name, app_module)
        fill_in_defaults()  # before any app's models, handlers or checks read one

    def ready(self):
        from django.db.models.signals import post_migrate, pre_migrate

        from outbox.handling import actors, limits  # noqa: F401 (retention registers its check)
        from outbox.placement import grants

        pre_migrate.connect(grants.before_migrate, sender=self)
        post_migrate.connect(grants.after_migrate, sender=self)
        actors.autodiscover()
        limits.check_configuration()
