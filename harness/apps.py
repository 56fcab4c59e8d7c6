from django.apps import AppConfig


class HarnessConfig(AppConfig):
    """`bench`, `chaos` and `simulate`: measuring and breaking the system from a checkout."""

    name = "harness"
    verbose_name = "Workshop (development only)"
