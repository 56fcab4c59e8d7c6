# Appended to the settings `django-admin startproject` wrote: the kernel and the two apps.
import os

from outbox.core.brokers import dramatiq_broker_settings

INSTALLED_APPS += ["django_dramatiq", "outbox", "orders", "billing"]  # noqa: F821
DRAMATIQ_BROKER = dramatiq_broker_settings(os.environ["BROKER_URL"], queue_prefix=os.environ["OUTBOX_QUEUE_PREFIX"])
DRAMATIQ_AUTODISCOVER_MODULES = ["handlers"]
DRAMATIQ_IGNORED_MODULES = ["django_dramatiq.tasks", "django.*"]
OUTBOX_QUEUE_PREFIX = os.environ["OUTBOX_QUEUE_PREFIX"]
OUTBOX_MAX_RETRIES = 1  # a poison order is a dead letter after one retry
OUTBOX_MIN_BACKOFF_MS, OUTBOX_MAX_BACKOFF_MS = 50, 100
# The tests' database in a file: a relay and workers in threads of a test (outbox_relay_and_workers)
# connect to it on their own, and SQLite's default for tests, a database in memory shared between
# threads, locks them out now and then ("database table is locked").
DATABASES["default"]["TEST"] = {"NAME": BASE_DIR / "test_db.sqlite3"}  # noqa: F821
