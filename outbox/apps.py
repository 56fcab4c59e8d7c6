import logging
import sys

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
        from django.db.models.signals import post_migrate, pre_migrate

        from outbox.handling import actors, limits  # noqa: F401 (retention registers its check)
        from outbox.placement import grants

        pre_migrate.connect(grants.before_migrate, sender=self)
        post_migrate.connect(grants.after_migrate, sender=self)
        actors.autodiscover()
        limits.check_configuration()
        show_the_kernels_lines()


def show_the_kernels_lines() -> None:
    """The relay's and the workers' lines (started, relayed, handled, dead-lettered) on stderr, at
    INFO, in a project whose LOGGING says nothing that reaches them: Django's default logging
    configures only its own loggers, and Python then prints WARNING and above alone, so a fresh
    project's relay said nothing at all. A project that routes them (a handler on `outbox` or on
    the root logger, as Dramatiq's worker processes set up) is left as it is."""
    kernel = logging.getLogger("outbox")
    if kernel.hasHandlers():
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    kernel.addHandler(handler)
    if kernel.level == logging.NOTSET:
        kernel.setLevel(logging.INFO)
