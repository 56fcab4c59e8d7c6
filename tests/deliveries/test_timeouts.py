"""Join timeout and deadline: timers the deliveries context sets for itself as delayed events."""

from datetime import timedelta
from uuid import UUID

from django.utils import timezone

from deliveries.models import Delivery
from drones.models import Assignment, Drone
from outbox.models import OutboxMessage
from outbox.testing import hand_over, pending, published, run_choreography
from packages.models import Package
from tests.factories import delivery_request


def requested(customer, **overrides) -> UUID:
    return UUID(customer.request(delivery_request(**overrides)).json()["deliveryId"])


def test_the_join_timer_is_set_for_the_configured_timeout(customer, settings):
    settings.DELIVERY_JOIN_TIMEOUT_SECONDS = 90
    delivery_id = requested(customer)

    timer = OutboxMessage.objects.get(type="delivery.join_timed_out")
    request = OutboxMessage.objects.get(type="delivery.requested")
    assert timer.correlation_id == delivery_id
    assert abs((timer.available_at - request.available_at).total_seconds() - 90) < 5


def test_a_delivery_missing_its_drone_at_the_timeout_fails_and_its_package_is_cancelled(customer, fleet, db):
    delivery_id = requested(customer)
    hand_over("delivery.requested", correlation_id=delivery_id, to="packages")
    hand_over("package.ready", correlation_id=delivery_id)

    hand_over("delivery.join_timed_out", correlation_id=delivery_id)
    run_choreography(correlation_id=delivery_id, hold=("delivery.requested",))

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("failed", "join_timeout")
    assert Package.objects.get(delivery_id=delivery_id).status == "cancelled"

    hand_over("delivery.requested", correlation_id=delivery_id, to="drones")  # the scheduler was slow
    run_choreography(correlation_id=delivery_id)
    assert Assignment.objects.get(delivery_id=delivery_id).status == "released"
    assert Drone.objects.filter(status="available").count() == 3
    assert Delivery.objects.get(id=delivery_id).status == "failed"


def test_a_drone_scheduled_after_the_timeout_is_released_and_never_resurrects_the_delivery(customer, fleet, db):
    delivery_id = requested(customer)
    hand_over("delivery.requested", correlation_id=delivery_id, to="drones")  # a drone is reserved...

    hand_over("delivery.join_timed_out", correlation_id=delivery_id)  # ...but its news is late
    hand_over("drone.scheduled", correlation_id=delivery_id)
    run_choreography(correlation_id=delivery_id)

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.drone_id) == ("failed", None)
    assert Drone.objects.filter(status="available").count() == 3
    assert "delivery.dispatched" not in [e.type for e in published(correlation_id=delivery_id)]


def test_the_join_timer_after_dispatch_changes_nothing(customer, fleet, db):
    delivery_id = requested(customer)
    [timer] = pending("delivery.join_timed_out", correlation_id=delivery_id)
    run_choreography(correlation_id=delivery_id)
    assert Delivery.objects.get(id=delivery_id).status == "delivered"

    # The end withdraws a timer still to fire; one the relay had already sent still arrives.
    hand_over(timer)

    assert Delivery.objects.get(id=delivery_id).status == "delivered"
    assert "delivery.failed" not in [e.type for e in published(correlation_id=delivery_id)]


def test_a_delivery_not_dispatched_by_its_deadline_fails_with_deadline_missed(customer, fleet, db):
    deadline = timezone.now() + timedelta(minutes=10)
    delivery_id = requested(customer, deadline=deadline.isoformat())
    assert OutboxMessage.objects.get(type="delivery.deadline_passed").available_at == deadline

    hand_over("delivery.deadline_passed", correlation_id=delivery_id)
    run_choreography(correlation_id=delivery_id)

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("failed", "deadline_missed")
    assert Drone.objects.filter(status="available").count() == 3


def test_no_deadline_sets_no_deadline_timer(customer):
    body = delivery_request()
    del body["deadline"]
    customer.request(body)
    assert published("delivery.deadline_passed") == []


def test_a_delivery_that_ends_withdraws_its_timers_still_to_fire(customer, fleet, db):
    """The overview listed the deadline timers of deliveries that had ended long ago as
    pending, and a delivered delivery's diagram said its deadline 'fires in 1 h 51 min'."""
    deadline = timezone.now() + timedelta(hours=2)
    ended = requested(customer, deadline=deadline.isoformat())
    running = requested(customer, deadline=deadline.isoformat())

    def pending(delivery_id):
        rows = OutboxMessage.objects.filter(correlation_id=delivery_id, published_at__isnull=True)
        return rows.filter(available_at__gt=timezone.now())

    assert pending(ended).count() == 2  # its join timeout and its deadline

    run_choreography(correlation_id=ended)

    assert Delivery.objects.get(id=ended).status == "delivered"
    assert list(pending(ended).values_list("type", flat=True)) == []
    assert sorted(pending(running).values_list("type", flat=True)) == [
        "delivery.deadline_passed",
        "delivery.join_timed_out",
    ]
