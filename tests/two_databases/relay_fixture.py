"""The kernel's pytest fixture `outbox_relay_and_workers` (kernel/outbox_pytest) with `drones` on a
database of their own: a relay for each database with an outbox, so the drones' events, in their
own outbox, are relayed as the others' are. Run by tests/test_two_databases.py."""

import threading
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from deliveries.models import Delivery
from outbox.core.working_database import working_in
from outbox.models import InboxMessage, OutboxMessage
from outbox.relaying.sweep import Sweeper
from tests.factories import requested
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)


def test_a_delivery_is_handled_through_a_relay_of_each_database(
    customer, fleet, outbox_relay_and_workers, outbox_wait_until_processed
):
    delivery_id = requested(customer)

    outbox_wait_until_processed(correlation_id=delivery_id, timeout=60)

    # As far as the events already due take it: its flight's reports are scheduled for later.
    assert Delivery.objects.get(id=delivery_id).status in ("in_transit", "delivered")
    scheduled = OutboxMessage.objects.using("drones").get(
        correlation_id=delivery_id, type="drone.scheduled", target_subscriber=""
    )
    assert scheduled.published_at is not None  # relayed from the drones' outbox
    assert InboxMessage.objects.using("default").filter(message_id=scheduled.message_id, subscriber="deliveries")


def test_a_relays_sweeper_works_in_the_database_its_relay_was_started_in(settings):
    """A relay in a thread of its own in one database (`working_in`, as the fixture runs them):
    its sweeper, a thread it starts, settles that database's outbox, not the process's default's."""
    settings.OUTBOX_SWEEP_GRACE_SECONDS = 0
    now, message_id, story = timezone.now(), uuid.uuid4(), uuid.uuid4()
    event = OutboxMessage.objects.using("drones").create(
        message_id=message_id,
        type="drone.scheduled",
        version=1,
        source="drones",
        occurred_at=now,
        correlation_id=story,
        stream=f"drone:{story}",
        sequence=1,
        payload={},
        available_at=now,
        published_at=now - timedelta(minutes=1),
        recipients=["deliveries"],
    )
    InboxMessage.objects.using("default").create(
        subscriber="deliveries", message_id=message_id, type="drone.scheduled", correlation_id=story
    )
    stop = threading.Event()
    with working_in("drones"):
        sweeper = Sweeper(stop)
    sweeper.start()
    try:
        settled = OutboxMessage.objects.using("drones").filter(pk=event.pk, acknowledged_at__isnull=False)
        wait_until(settled.exists, what="the drones' event settled by the sweep")
    finally:
        stop.set()
        sweeper.join(10)
