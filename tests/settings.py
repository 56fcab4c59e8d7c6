"""Test settings: the real settings plus a probe context, on a queue prefix of this run's own."""

import os
import sys
import uuid
from pathlib import Path

# The kernel's test rig (its probe context, outbox_tests), for pytest and for every process a test starts.
sys.path.append(str(Path(__file__).resolve().parent.parent / "kernel" / "tests"))

# Set in the environment (not only here) so worker and relay subprocesses share the prefix.
os.environ.setdefault("OUTBOX_QUEUE_PREFIX", f"test-{uuid.uuid4().hex[:8]}-")
# The run's name for its throwaway database; pytest-django adds `_gw0` and so on under pytest-xdist.
RUN_ID = os.environ["OUTBOX_QUEUE_PREFIX"].strip("-").replace("-", "_")
# Under pytest-xdist each worker process is a run of its own: its own queues (and, from pytest-django,
# its own throwaway database). The processes a worker starts inherit the prefix as the worker (or
# the test) left it, and OUTBOX_QUEUE_PREFIX_OF says it is no longer the whole session's.
if (xdist_worker := os.environ.get("PYTEST_XDIST_WORKER")) and os.environ.get("OUTBOX_QUEUE_PREFIX_OF") != xdist_worker:
    os.environ["OUTBOX_QUEUE_PREFIX"] += f"{xdist_worker}-"
    os.environ["OUTBOX_QUEUE_PREFIX_OF"] = xdist_worker

from delivery_project.settings import *  # noqa: E402,F403
from delivery_project.settings import CONN_MAX_AGE, DATABASES, INSTALLED_APPS, VAR_DIR  # noqa: E402

INSTALLED_APPS = [*INSTALLED_APPS, "outbox_tests.probe"]
OUTBOX_ASYNCAPI_LEAVE_OUT = ["probe"]  # the catalogue is of what ships

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not pytest-django's in-memory default, so worker threads and subprocesses see it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"{RUN_ID}.sqlite3")}
else:
    if os.environ.get("STARTED_BY_TESTS") != "1":
        # pytest's own threads (a relay in a thread, threads on a barrier) never hand a connection
        # back the way a request or a message does, so the pytest process keeps one per thread;
        # the processes the tests start (STARTED_BY_TESTS=1) draw from the pool as production does.
        DATABASES["default"]["OPTIONS"].pop("pool", None)
        DATABASES["default"]["CONN_MAX_AGE"] = CONN_MAX_AGE
    # A throwaway database of this run's own: two runs on one server never meet.
    DATABASES["default"]["TEST"] = {"NAME": f"{DATABASES['default']['NAME']}_{RUN_ID}"}
    if OUTBOX_LISTEN_CONNECTION and os.environ.get("STARTED_BY_TESTS") != "1":  # noqa: F405
        # The relays the tests run in threads listen (directly, bypassing a pooler) there too.
        listened = DATABASES["default"]["TEST"]["NAME"] + (f"_{xdist_worker}" if xdist_worker else "")
        OUTBOX_LISTEN_CONNECTION = {**OUTBOX_LISTEN_CONNECTION, "dbname": listened}  # noqa: F405

for _alias, _db in DATABASES.items():  # a context on a database of its own (CONTEXT_DATABASE_URLS): as default's
    if _alias != "default" and _db["ENGINE"] != "django.db.backends.sqlite3":
        if os.environ.get("STARTED_BY_TESTS") != "1":
            _db["OPTIONS"].pop("pool", None)
            _db["CONN_MAX_AGE"] = CONN_MAX_AGE
        _db["TEST"] = {"NAME": f"{_db['NAME']}_{RUN_ID}"}

OUTBOX_MAX_RETRIES = 3
OUTBOX_MIN_BACKOFF_MS = 20
OUTBOX_MAX_BACKOFF_MS = 200
OUTBOX_MAX_HOPS = 8
OUTBOX_RELAY_POLL_SECONDS = 0.2
OUTBOX_HEARTBEAT_SECONDS = 0.5
METRICS_STATE_CACHE_SECONDS = 0  # each scrape reads the state the test has just made (the cache has its own test)
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Flights land at once, with few reports, so the choreography runs at test speed.
DRONE_SIMULATION_SPEEDUP = 1_000_000
DRONE_POSITION_REPORTS = 3

# The probe (outbox_tests.probe) is a test app with handlers of its own, not one of the contexts: it runs as
# the project's role, as outbox.W003 would say at every command the tests start.
SILENCED_SYSTEM_CHECKS = ["outbox.W003"]
