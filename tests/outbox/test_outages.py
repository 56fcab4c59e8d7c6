"""Outages of the real broker: every connection to RabbitMQ closed under the relay and the workers."""

import threading

import pytest
from django.conf import settings
from outbox_tests.probe.models import Effect
from outbox_tests.probe.services import ping
from outbox_tests.relaying import effects_per_message, in_thread

from harness.chaos import close_every_broker_connection
from outbox.models import OutboxMessage
from outbox.relaying.relay import Relay
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.rabbitmq]


def test_when_rabbitmq_closes_every_connection_relay_and_workers_reconnect_and_nothing_is_lost(worker, broker):
    stop = threading.Event()
    running = in_thread(Relay(broker=broker).run, stop=stop)
    try:
        for n in range(10):
            ping(n=n)
        wait_until(lambda: Effect.objects.count() == 20, what="the first 10 events to be processed")

        # Every connection of this run's (the relay's, each consumer's), none of another run's.
        assert close_every_broker_connection(queue_prefix=settings.OUTBOX_QUEUE_PREFIX) >= 2
        for n in range(10, 40):
            ping(n=n)  # what requests do meanwhile: they commit, whatever the broker's state

        wait_until(
            lambda: not OutboxMessage.objects.filter(published_at__isnull=True).exists(),
            timeout=90,
            what="the relay to reconnect and drain",
        )
        wait_until(lambda: Effect.objects.count() >= 80, timeout=90, what="the workers to reconnect and process")
    finally:
        stop.set()
        running.join(10)
        del broker.connection  # this thread's own connection was closed too; the fixtures' teardown needs one
    assert effects_per_message() == {1: 80}
