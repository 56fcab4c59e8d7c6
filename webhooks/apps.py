from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    """Business customers' endpoints: each status change of their deliveries POSTed, signed, retried until it lands."""

    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"
