"""The kernel's tests run on outbox_tests.settings, with outbox_tests.plugin's fixtures and run rules."""

pytest_plugins = ["outbox_tests.plugin"]
