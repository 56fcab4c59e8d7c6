"""The documented commands, as separate processes: workers, relay --once, relay stopped by SIGTERM."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from outbox.models import OutboxMessage
from tests.conftest import wait_until
from tests.probe.models import Effect
from tests.probe.services import ping

pytestmark = pytest.mark.integration
MANAGE = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]


def test_database_url() -> str:
    """The URL of pytest-django's throwaway database, for the subprocesses."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


test_database_url.__test__ = False


@pytest.fixture
def env(transactional_db, broker):
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": test_database_url(),
        "STARTED_BY_TESTS": "1",
    }


@pytest.fixture
def workers(env):
    process = subprocess.Popen(
        [*MANAGE, "rundramatiq", "--processes", "1", "--threads", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield process
    process.send_signal(signal.SIGTERM)
    process.wait(30)


def test_relay_once_and_worker_processes_deliver_every_event(env, workers):
    for n in range(5):
        ping(n=n)

    relay = subprocess.run([*MANAGE, "relay_outbox", "--once"], env=env, capture_output=True, text=True, timeout=60)

    assert relay.returncode == 0, relay.stderr
    assert "relayed 5 events" in relay.stdout
    wait_until(lambda: Effect.objects.count() == 10, timeout=60, what="the worker processes to handle 5 x 2")


def test_sigterm_lets_the_relay_finish_and_exit_cleanly(env):
    relay = subprocess.Popen(
        [*MANAGE, "relay_outbox"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        ping(n=1)
        wait_until(
            lambda: OutboxMessage.objects.filter(published_at__isnull=False).exists(),
            what="the running relay to publish",
        )
        relay.send_signal(signal.SIGTERM)
        output, _ = relay.communicate(timeout=30)
    finally:
        relay.kill()
    assert relay.returncode == 0, output
    assert "relay stopped" in output
