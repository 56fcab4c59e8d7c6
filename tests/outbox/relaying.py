"""Relays in threads, many events at once, a broker behind a cable the test can pull, and effects counted."""

import threading
from urllib.parse import urlsplit, urlunsplit

import dramatiq
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.redis import RedisBroker

from outbox.core.publishing import publish
from outbox.models import OutboxMessage
from tests.probe.events import ProbePinged
from tests.probe.models import Effect
from tests.tcp_proxy import TcpProxy


def published_count() -> int:
    return OutboxMessage.objects.filter(published_at__isnull=False).count()


def effects_per_message() -> dict[str, int]:
    """How many times each (subscriber, message) took effect, keyed by that count."""
    rows = Effect.objects.values("subscriber", "message_id").annotate(times=Count("id"))
    return {times: sum(1 for r in rows if r["times"] == times) for times in {r["times"] for r in rows}}


def publish_many(count: int, *, chunk: int = 500) -> None:
    for start in range(0, count, chunk):
        with transaction.atomic():
            for n in range(start, min(start + chunk, count)):
                publish(ProbePinged(n=n), stream=f"bulk:{n}")


def in_thread(target, *args, **kwargs) -> threading.Thread:
    """Run `target` in a thread that closes its own database connection when done."""

    def run():
        try:
            target(*args, **kwargs)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def broker_behind(proxy: TcpProxy) -> dramatiq.Broker:
    """A second connection to the same real broker, through a cable the test can pull."""
    url = urlsplit(settings.BROKER_URL)
    via_proxy = urlunsplit(
        url._replace(netloc=url.netloc.replace(f"{url.hostname}:{url.port}", f"127.0.0.1:{proxy.port}"))
    )
    if url.scheme.startswith("amqp"):
        return RabbitmqBroker(url=via_proxy, confirm_delivery=True, middleware=[])
    return RedisBroker(url=via_proxy, namespace=dramatiq.get_broker().namespace, middleware=[])
