from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """A downstream subscriber added without changing any producer: tells customers what happened."""

    name = "notifications"
