from django.apps import AppConfig


class OutboxConfig(AppConfig):
    """The messaging kernel every bounded context uses."""

    name = "outbox"
    verbose_name = "Messaging (outbox, inbox, dead letters)"

    def ready(self):
        from outbox import limits, retention, subscriptions  # noqa: F401 (retention registers its check)

        subscriptions.autodiscover()
        limits.check_configuration()
