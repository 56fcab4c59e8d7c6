"""PATCH /api/deliveryrequests/{id}: change times or places before dispatch; new places re-run scheduling."""

from datetime import timedelta
from uuid import UUID

from django.utils import timezone

from deliveries.models import Delivery
from drones.models import Assignment, Drone
from outbox.testing import hand_over, pending, published, run_choreography
from tests.factories import BASE, delivery_request

NEW_DROPOFF = {"latitude": BASE[0] + 0.02, "longitude": BASE[1] - 0.02, "altitude": 10.0}


def patch(customer, delivery_id, body):
    return customer.client.patch(f"/api/deliveryrequests/{delivery_id}", body, content_type="application/json")


def requested(customer) -> UUID:
    return UUID(customer.request().json()["deliveryId"])


def test_a_new_drop_off_before_dispatch_releases_the_drone_and_schedules_again(customer, fleet, db):
    delivery_id = requested(customer)
    hand_over("delivery.requested", correlation_id=delivery_id)
    hand_over("drone.scheduled", correlation_id=delivery_id)
    assert Delivery.objects.get(id=delivery_id).status == "scheduled"

    response = patch(customer, delivery_id, {"dropOffLocation": NEW_DROPOFF})

    assert response.status_code == 202
    assert response.json()["dropOffLocation"] == NEW_DROPOFF and response.json()["status"] == "requested"
    run_choreography(correlation_id=delivery_id)
    types = [e.type for e in published(correlation_id=delivery_id)]
    assert types.index("delivery.rescheduled") < types.index("drone.released")
    assert types.count("drone.scheduled") == 2 and types[-1] in ("drone.released", "delivery.completed")
    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.schedule_round) == ("delivered", 2)
    assignment = Assignment.objects.get(delivery_id=delivery_id)
    assert (assignment.round, assignment.dropoff_latitude) == (2, NEW_DROPOFF["latitude"])
    assert delivery.last_known_location["latitude"] == NEW_DROPOFF["latitude"]
    assert Drone.objects.filter(status="available").count() == 3


def test_an_answer_to_the_old_round_arriving_late_is_ignored(customer, fleet, db):
    delivery_id = requested(customer)
    hand_over("delivery.requested", correlation_id=delivery_id, to="drones")  # round 1 reserves a drone

    patch(customer, delivery_id, {"dropOffLocation": NEW_DROPOFF})
    first_answer = pending("drone.scheduled", correlation_id=delivery_id)[0]
    hand_over(first_answer)  # round 1's answer reaches deliveries after the reschedule

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.drone_id) == ("requested", None)
    run_choreography(correlation_id=delivery_id)
    assert Delivery.objects.get(id=delivery_id).status == "delivered"
    assert Drone.objects.filter(status="available").count() == 3


def test_a_new_deadline_replaces_the_old_deadline_timer_and_leaves_the_drone(customer, fleet, db):
    delivery_id = requested(customer)
    hand_over("delivery.requested", correlation_id=delivery_id)
    later = timezone.now() + timedelta(hours=5)

    assert patch(customer, delivery_id, {"deadline": later.isoformat()}).status_code == 202
    old_timer = pending("delivery.deadline_passed", correlation_id=delivery_id)[0]
    hand_over(old_timer)  # the first deadline comes: it no longer applies

    delivery = Delivery.objects.get(id=delivery_id)
    assert delivery.status != "failed" and delivery.deadline == later
    assert len(published("delivery.deadline_passed", correlation_id=delivery_id)) == 2
    assert Drone.objects.filter(status="reserved").count() == 1  # times changed, not places: same drone


def test_rescheduling_after_dispatch_is_409(customer, fleet, db):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("delivery.dispatched",))

    response = patch(customer, delivery_id, {"dropOffLocation": NEW_DROPOFF})

    assert response.status_code == 409 and "in_transit" in response.json()["detail"]


def test_another_customers_delivery_cannot_be_rescheduled(customer, other_customer):
    delivery_id = requested(customer)
    assert patch(other_customer, delivery_id, {"deadline": timezone.now().isoformat()}).status_code == 404


def test_bad_reschedules_name_the_field(customer):
    delivery_id = requested(customer)
    body = delivery_request()

    cases = [
        ({}, "body"),
        ({"deadline": "2000-01-01T00:00:00Z"}, "deadline"),
        ({"dropOffLocation": {"latitude": 123, "longitude": 0}}, "dropOffLocation.latitude"),
        ({"pickupTime": "soon"}, "pickupTime"),
    ]
    for change, field in cases:
        response = patch(customer, delivery_id, change)
        assert response.status_code == 422, (change, response.content)
        assert field in [e["field"] for e in response.json()["errors"]], (change, response.json())
    assert Delivery.objects.get(id=delivery_id).dropoff_location == body["dropOffLocation"] | {"altitude": None}


def test_a_reschedule_checks_the_deadline_against_the_new_places_not_the_old(customer, settings):
    settings.DRONE_SIMULATION_SPEEDUP, settings.DELIVERY_FASTEST_DRONE_KMH = 1, 60  # real flights: a km a minute
    pickup_time = timezone.now() + timedelta(minutes=5)
    deadline = pickup_time + timedelta(minutes=3)
    body = delivery_request(pickupTime=pickup_time.isoformat(), deadline=deadline.isoformat())
    delivery_id = UUID(customer.request(body).json()["deliveryId"])  # 2.4 km: 2.5 min, within the 3 min
    far = {"latitude": BASE[0] - 0.2, "longitude": BASE[1] + 0.2, "altitude": 10.0}  # about 25 km from the pickup
    near = {"latitude": BASE[0] + 0.005, "longitude": BASE[1], "altitude": 10.0}  # about 0.6 km from the pickup

    too_far = patch(customer, delivery_id, {"dropOffLocation": far})

    assert too_far.status_code == 422, too_far.content
    (error,) = too_far.json()["errors"]
    assert error["field"] == "deadline" and "at or after" in error["message"]
    assert Delivery.objects.get(id=delivery_id).dropoff_location == body["dropOffLocation"] | {"altitude": None}
    one_minute = (pickup_time + timedelta(minutes=1)).isoformat()  # too soon from the old drop-off, not the new one
    closer = patch(customer, delivery_id, {"dropOffLocation": near, "deadline": one_minute})
    assert closer.status_code == 202, closer.content
    assert Delivery.objects.get(id=delivery_id).dropoff_location == near
