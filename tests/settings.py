"""Test settings: the real settings plus a probe context, on a queue prefix of this run's own."""

import os
import sys
from pathlib import Path

# The kernel's test rig (its probe context, outbox_tests), for pytest and for every process a test starts.
sys.path.append(str(Path(__file__).resolve().parent.parent / "kernel" / "tests"))

from outbox_tests.runs import AT_TEST_SPEED, this_run  # noqa: E402

RUN_ID, xdist_worker = this_run()  # before the settings read the queue prefix

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

globals().update(AT_TEST_SPEED)
METRICS_STATE_CACHE_SECONDS = 0  # each scrape reads the state the test has just made (the cache has its own test)
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Flights land at once, with few reports, so the choreography runs at test speed.
DRONE_SIMULATION_SPEEDUP = 1_000_000
DRONE_POSITION_REPORTS = 3

# The probe (outbox_tests.probe) is a test app with handlers of its own, not one of the contexts: it runs as
# the project's role, as outbox.W003 would say at every command the tests start.
SILENCED_SYSTEM_CHECKS = ["outbox.W003"]
