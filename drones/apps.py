from django.apps import AppConfig


class DronesConfig(AppConfig):
    """The drone scheduler context: the fleet and which drone flies which delivery."""

    name = "drones"
