from django.apps import AppConfig


class DeliveryProjectConfig(AppConfig):
    """The deployable itself: wiring and the commands that run the whole system."""

    name = "delivery_project"
    verbose_name = "Drone delivery"
