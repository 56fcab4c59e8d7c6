from django.apps import AppConfig


class DeliveriesConfig(AppConfig):
    """The Delivery context: the customer's request and its status, and the customer API."""

    name = "deliveries"
