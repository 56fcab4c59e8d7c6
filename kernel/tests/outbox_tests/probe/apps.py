from django.apps import AppConfig


class ProbeConfig(AppConfig):
    """A test-only context whose handlers can be told to fail, to exercise the kernel."""

    name = "outbox_tests.probe"
    label = "probe"
