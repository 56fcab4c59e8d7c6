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
        from outbox.handling import actors, limits  # noqa: F401 (retention registers its check)

        actors.autodiscover()
        limits.check_configuration()
