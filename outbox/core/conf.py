"""The kernel's settings and their defaults: a project sets only what it changes.

The kernel reads each as `settings.OUTBOX_...` where it is used, so a test's `override_settings`
works as for any Django setting. What a project leaves out is filled in from `DEFAULTS` once, when
Django loads the app (`OutboxConfig`), as django-appconf does. The guide's Settings page says
what each one does.
"""

import copy

import dramatiq
from django.conf import settings
from django.core import checks
from dramatiq.middleware import TimeLimit

from outbox.core.brokers import is_rabbitmq

DAY = 24 * 3600

DEFAULTS: dict[str, object] = {
    # Queues and retries
    "OUTBOX_QUEUE_PREFIX": "",  # before each subscriber's queue name: several deployments on one broker
    "OUTBOX_MAX_RETRIES": 5,  # a failing handler's retries, with backoff, before its dead letter
    "OUTBOX_MIN_BACKOFF_MS": 1000,
    "OUTBOX_MAX_BACKOFF_MS": 60000,
    "OUTBOX_MAX_HOPS": 32,  # a causal chain longer than this is an event storm: loop_detected
    "OUTBOX_DEAD_LETTER_RETRIES": 20,  # further attempts when even writing the dead letter fails
    "OUTBOX_MESSAGE_TTL_SECONDS": 7 * DAY,  # undelivered this long after relaying: expired
    "OUTBOX_SUBSCRIBER_LIMITS": {},  # {"subscriber": {"concurrency": 4, "per_second": 50}}
    "OUTBOX_LIMITS_REDIS_URL": "",  # the limits' counters; empty: the broker's Redis, if it is one
    "OUTBOX_MAX_EVENT_BYTES": 64 * 1024,  # publish() refuses a larger envelope (EventTooLarge)
    "OUTBOX_HANDLED_LOG_LEVEL": "INFO",  # the one line per handled message
    # Each context owns its data (PostgreSQL; outbox.placement.roles)
    "OUTBOX_CONTEXTS": [],  # app labels: each gets a schema and a role of its own; []: one schema, one role
    "OUTBOX_SCHEMA": "outbox",  # the kernel's tables' schema, when OUTBOX_CONTEXTS is set
    "OUTBOX_CONTEXT_ROLE_PREFIX": "context_",  # a context's role: this + its label (roles are the cluster's)
    "OUTBOX_CONTEXT_URLS": {},  # {"/api/": "orders"}: a request's role by its path's prefix
    # {"invoices": "billing"}: a context's tables, and the kernel's beside them, on a database of its own
    # (an alias of DATABASES; outbox.placement.databases). {}: every context on `default`
    "OUTBOX_CONTEXT_DATABASES": {},
    "OUTBOX_TRANSACTION_POOLER": False,  # through PgBouncer's transaction mode: roles per transaction
    # The relay
    "OUTBOX_HEARTBEAT_SECONDS": 5.0,
    "OUTBOX_RELAY_BATCH_SIZE": 1000,
    "OUTBOX_RELAY_PACK_SIZE": 20,  # copies for one queue in one broker message, at most (RabbitMQ; 1: no packs)
    "OUTBOX_PACK_TRANSACTION": True,  # a pack's envelopes share one transaction (False: one each)
    "OUTBOX_RELAY_LEASE_SECONDS": 30.0,
    "OUTBOX_RELAY_POLL_SECONDS": 1.0,
    "OUTBOX_RELAY_MAX_BACKOFF_SECONDS": 5.0,
    "OUTBOX_LISTEN_CONNECTION": None,  # psycopg connect() keywords for LISTEN; None: the default database's
    "OUTBOX_LISTEN_CHECK_SECONDS": 60.0,
    "OUTBOX_RELAY_MAX_SEND_ATTEMPTS": 5,  # then an `unsendable` dead letter
    "OUTBOX_RELAY_QUEUE_WAIT_SECONDS": 600.0,  # a queue that returns the copies is waited for this long
    # The redelivery sweep and retention
    "OUTBOX_SWEEP_INTERVAL_SECONDS": 60.0,
    "OUTBOX_SWEEP_GRACE_SECONDS": 900.0,
    "OUTBOX_SWEEP_MAX_RESENDS": 3,  # then a `never_acknowledged` dead letter
    "OUTBOX_SWEEP_HORIZON_SECONDS": 7.0 * DAY,
    "OUTBOX_RETENTION_SECONDS": 30.0 * DAY,  # prune_messages deletes what is older
    # The event catalogue as AsyncAPI (manage.py export_asyncapi, whose options override these)
    "OUTBOX_ASYNCAPI_TITLE": None,  # None: "<the settings module's first name> events" (mysite.settings: mysite)
    "OUTBOX_ASYNCAPI_VERSION": "0.0.0",  # the catalogue's own: raise it with each contract added or versioned
    "OUTBOX_ASYNCAPI_SERVERS": {},  # name: a broker URL (its credentials left out) or an AsyncAPI Server Object
    "OUTBOX_ASYNCAPI_LEAVE_OUT": [],  # contexts (apps) whose events and handlers the document leaves out
}


def fill_in_defaults() -> None:
    """Give every kernel setting the project did not set its default (a copy: never shared)."""
    for name, value in DEFAULTS.items():
        if not hasattr(settings, name):
            setattr(settings, name, copy.deepcopy(value))


# RabbitMQ 4's default `max_message_size`. A larger message makes the broker close the relay's channel.
BROKER_MESSAGE_BYTES = 16 * 1024 * 1024


@checks.register()
def packs_fit_in_a_broker_message(app_configs=None, **kwargs):
    """The largest pack the settings allow must fit in one broker message: one that does not closes
    the relay's channel, and its rows are sent again in halves until they fit (nothing is lost, but
    every full batch pays for it)."""
    largest = settings.OUTBOX_RELAY_PACK_SIZE * settings.OUTBOX_MAX_EVENT_BYTES
    if largest <= BROKER_MESSAGE_BYTES:
        return []
    return [
        checks.Warning(
            f"a pack may reach {largest:,} bytes (OUTBOX_RELAY_PACK_SIZE x OUTBOX_MAX_EVENT_BYTES), over "
            f"RabbitMQ's default max_message_size of {BROKER_MESSAGE_BYTES:,}",
            hint="lower OUTBOX_RELAY_PACK_SIZE, or raise the broker's max_message_size to match",
            id="outbox.W001",
        )
    ]


# RabbitMQ's default consumer_timeout: a message left unacknowledged this long has its channel closed,
# and every message unacknowledged on that channel is delivered again.
CONSUMER_TIMEOUT_MS = 30 * 60 * 1000


@checks.register()
def packs_end_within_the_consumer_timeout(app_configs=None, broker: dramatiq.Broker | None = None, **kwargs):
    """A pack may take two of Dramatiq's time limits (outbox.handling.packs hands what is left of it on
    alone once it has used one, and the envelope running then has a limit of its own). Past RabbitMQ's
    consumer_timeout its channel is closed, and every pack prefetched on it comes again, to be unpacked."""
    if settings.OUTBOX_RELAY_PACK_SIZE <= 1:
        return []
    broker = broker or dramatiq.get_broker()
    limits = [m.time_limit for m in broker.middleware if isinstance(m, TimeLimit)]
    if not is_rabbitmq(broker) or not limits or 2 * max(limits) < CONSUMER_TIMEOUT_MS:
        return []
    return [
        checks.Warning(
            f"a pack may take twice Dramatiq's time limit of {max(limits) / 60_000:g} minutes, not below "
            f"RabbitMQ's default consumer_timeout of {CONSUMER_TIMEOUT_MS // 60_000} minutes",
            hint="keep the TimeLimit middleware's time_limit under half the broker's consumer_timeout (raise "
            "that if need be), or set OUTBOX_RELAY_PACK_SIZE = 1",
            id="outbox.W002",
        )
    ]


HANDLED_LOG_LEVELS = ("DEBUG", "INFO", "WARNING")


@checks.register()
def handled_log_level_is_a_level(app_configs=None, **kwargs):
    """The one line per handled message is logged at OUTBOX_HANDLED_LOG_LEVEL: a name logging does
    not know (a lower-case one, a typo) made that line raise for every message, after its transaction
    had committed, so Dramatiq retried each (its copies then duplicates) until it set it aside."""
    level = settings.OUTBOX_HANDLED_LOG_LEVEL
    if level in HANDLED_LOG_LEVELS:
        return []
    return [
        checks.Error(
            f"OUTBOX_HANDLED_LOG_LEVEL is {level!r}: one of {', '.join(HANDLED_LOG_LEVELS)}",
            hint="a level's name in capitals, as the logging module writes it",
            id="outbox.E002",
        )
    ]
