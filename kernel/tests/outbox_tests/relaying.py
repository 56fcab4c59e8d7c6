"""Relays in threads, many events at once, a broker behind a cable the test can pull, and effects counted."""

import threading
import uuid
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import dramatiq
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.redis import RedisBroker

from outbox.core.publishing import publish
from outbox.models import InboxMessage, OutboxMessage
from outbox_tests.probe.events import ProbePinged
from outbox_tests.probe.models import Effect
from outbox_tests.probe.services import ping
from outbox_tests.tcp_proxy import TcpProxy


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


def envelopes(count: int, **ping_options) -> list[dict]:
    """`count` pings published, as the relay would send them."""
    return [OutboxMessage.objects.get(stream=f"ping:{ping(n=n, **ping_options).pk}").envelope() for n in range(count)]


def taken_off(broker, queue: str) -> list[dramatiq.Message]:
    """The messages waiting in `queue`, in order, taken off it."""
    messages = []
    while True:
        method, _, body = broker.channel.basic_get(queue, auto_ack=True)
        if method is None:
            return messages
        messages.append(dramatiq.Message.decode(body))


def relayed_and_acknowledged(
    count: int, *, seconds_ago: float, acknowledged_by=("probe_a", "probe_b")
) -> set[uuid.UUID]:
    """`count` pings the relay sent `seconds_ago`, each processed by `acknowledged_by`: their message ids."""
    sent = timezone.now() - timedelta(seconds=seconds_ago)
    rows = [
        OutboxMessage(
            message_id=uuid.uuid4(),
            type="probe.pinged",
            version=1,
            source="probe",
            occurred_at=sent,
            correlation_id=uuid.uuid4(),
            stream=f"load:{uuid.uuid4()}",
            sequence=1,
            payload={"n": 0},
            available_at=sent,
            published_at=sent,
            send_attempts=1,
            recipients=["probe_a", "probe_b"],
        )
        for _ in range(count)
    ]
    OutboxMessage.objects.bulk_create(rows)
    InboxMessage.objects.bulk_create(
        InboxMessage(subscriber=subscriber, message_id=row.message_id, type=row.type, correlation_id=row.correlation_id)
        for row in rows
        for subscriber in acknowledged_by
    )
    return {row.message_id for row in rows}
