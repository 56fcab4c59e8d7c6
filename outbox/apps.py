from django.apps import AppConfig


class OutboxConfig(AppConfig):
    """The messaging kernel every bounded context uses."""

    name = "outbox"
    verbose_name = "Messaging (outbox, inbox, dead letters)"

    def ready(self):
        from outbox import actors, limits, retention  # noqa: F401 (retention registers its check)

        actors.autodiscover()
        limits.check_configuration()
