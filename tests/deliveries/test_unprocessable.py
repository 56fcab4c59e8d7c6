"""The defensive second line: a message the deliveries context can never process is
dead-lettered at once with a reason code, and the delivery is failed without reading its row, so
the compensations release the drone and cancel the package instead of leaving them held forever."""

import pytest
from django.db import connection

import outbox.core.subscriptions
from deliveries.models import Delivery
from drones.models import Drone
from outbox.handling.dispatch import dispatch
from outbox.models import DeadLetter, OutboxMessage
from outbox.testing import hand_over, pending, run_choreography
from packages.models import Package
from tests.factories import requested

DELIVERIES = Delivery._meta.db_table


def reserved_and_ready(customer):
    """A delivery whose drone is reserved and whose package is registered, before deliveries hears of it."""
    delivery_id = requested(customer)
    hand_over("delivery.requested", correlation_id=delivery_id)
    assert Drone.objects.filter(status="reserved").count() == 1
    return delivery_id


def state(delivery_id) -> tuple[str, str]:
    # values_list reads only these columns: the row's other values may be unreadable.
    return Delivery.objects.filter(id=delivery_id).values_list("status", "status_reason").get()


def compensations_run(delivery_id) -> None:
    for subscriber in ("drones", "packages"):
        hand_over("delivery.failed", correlation_id=delivery_id, to=subscriber)


@pytest.mark.postgres
def test_a_stored_date_that_cannot_be_read_back_fails_the_delivery_and_releases_its_drone(customer, fleet, db):
    delivery_id = reserved_and_ready(customer)
    with connection.cursor() as cursor:  # what a year-10000 pickupTime once left behind
        cursor.execute(f"UPDATE {DELIVERIES} SET pickup_time = '10000-01-01T00:00:00Z' WHERE id = %s", [delivery_id])
    with pytest.raises(Exception):  # noqa: B017 - psycopg's own DataError, wrapped by Django
        Delivery.objects.get(id=delivery_id)

    [scheduled] = pending("drone.scheduled", correlation_id=delivery_id, to="deliveries")
    hand_over(scheduled, to="deliveries", dead_letters="keep")

    letter = DeadLetter.objects.get(subscriber="deliveries", message_id=scheduled.message_id)
    assert (letter.reason, letter.attempts) == ("unprocessable", 1)
    assert state(delivery_id) == ("failed", "unprocessable")
    compensations_run(delivery_id)
    assert Drone.objects.filter(status="available").count() == 3
    assert Package.objects.get(delivery_id=delivery_id).status == "cancelled"


def test_an_unreadable_payload_fails_the_delivery_and_releases_its_drone(customer, fleet, db):
    delivery_id = reserved_and_ready(customer)
    scheduled = OutboxMessage.objects.get(type="drone.scheduled", correlation_id=delivery_id)
    envelope = scheduled.envelope()
    del envelope["payload"]["eta"]

    dispatch(subscriber="deliveries", body=envelope)

    letter = DeadLetter.objects.get(subscriber="deliveries", message_id=scheduled.message_id)
    assert (letter.reason, letter.attempts) == ("invalid_payload", 1)
    assert state(delivery_id) == ("failed", "unprocessable")
    failed = OutboxMessage.objects.get(type="delivery.failed", correlation_id=delivery_id)
    assert (failed.payload["reason"], failed.causation_id) == ("unprocessable", scheduled.message_id)
    compensations_run(delivery_id)
    assert Drone.objects.filter(status="available").count() == 3


def test_a_finished_delivery_is_left_as_it_is(customer, fleet, db):
    delivery_id = reserved_and_ready(customer)
    run_choreography(correlation_id=delivery_id)
    assert state(delivery_id) == ("delivered", "")
    envelope = OutboxMessage.objects.get(type="drone.scheduled", correlation_id=delivery_id).envelope()
    envelope["message_id"] = "00000000-0000-4000-8000-000000000001"
    del envelope["payload"]["eta"]

    dispatch(subscriber="deliveries", body=envelope)

    assert state(delivery_id) == ("delivered", "")
    assert not OutboxMessage.objects.filter(type="delivery.failed", correlation_id=delivery_id).exists()


def test_a_compensation_that_fails_still_leaves_a_dead_letter_saying_so(customer, fleet, db, monkeypatch):
    delivery_id = reserved_and_ready(customer)
    envelope = OutboxMessage.objects.get(type="drone.scheduled", correlation_id=delivery_id).envelope()
    del envelope["payload"]["eta"]

    def broken(envelope):
        raise RuntimeError("compensation broke")

    monkeypatch.setitem(outbox.core.subscriptions._unprocessable_hooks, "deliveries", broken)
    dispatch(subscriber="deliveries", body=envelope)

    letter = DeadLetter.objects.get(subscriber="deliveries")
    assert (letter.reason, letter.error) == ("compensation_failed", "compensation broke")
    assert state(delivery_id) == ("requested", "")  # the failing compensation was rolled back whole
    assert not OutboxMessage.objects.filter(type="delivery.failed", correlation_id=delivery_id).exists()


def test_a_delivery_in_flight_is_not_failed_by_a_report_that_cannot_be_read(customer, fleet, db):
    delivery_id = reserved_and_ready(customer)
    hand_over("drone.scheduled", correlation_id=delivery_id)
    hand_over("package.ready", correlation_id=delivery_id)
    assert state(delivery_id) == ("in_transit", "")
    hand_over("delivery.dispatched", correlation_id=delivery_id, to="drones")  # the drone takes off
    report = OutboxMessage.objects.filter(type="drone.position_reported", correlation_id=delivery_id).first()
    envelope = report.envelope() if report else None
    assert envelope is not None, "no position report published"
    envelope["payload"]["latitude"] = "north"

    dispatch(subscriber="deliveries", body=envelope)

    assert DeadLetter.objects.get(subscriber="deliveries").reason == "invalid_payload"
    assert state(delivery_id) == ("in_transit", "")
    assert Drone.objects.filter(status="in_flight").count() == 1
    assert not OutboxMessage.objects.filter(type="delivery.failed", correlation_id=delivery_id).exists()


def test_a_message_of_an_older_scheduling_round_fails_nothing(customer, fleet, db):
    delivery_id = reserved_and_ready(customer)
    Delivery.objects.filter(id=delivery_id).update(schedule_round=2)  # rescheduled since
    envelope = OutboxMessage.objects.get(type="drone.scheduled", correlation_id=delivery_id).envelope()
    assert envelope["payload"]["round"] == 1
    del envelope["payload"]["eta"]

    dispatch(subscriber="deliveries", body=envelope)

    assert DeadLetter.objects.get(subscriber="deliveries").reason == "invalid_payload"
    assert state(delivery_id) == ("requested", "")
