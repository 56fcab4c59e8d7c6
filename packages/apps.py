from django.apps import AppConfig


class PackagesConfig(AppConfig):
    """The Package context: what is carried, and whether it can fly."""

    name = "packages"
