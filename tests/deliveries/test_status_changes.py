"""`delivery.status_changed`: one per change of a delivery's status, on every path a delivery can take.

Each scenario drives one delivery message by message (and through the API), reads its row after
every step, and compares the statuses it went through with the events on its stream: a path that
changes the status without announcing it, or announces a change that did not happen, fails here."""

from datetime import datetime, timedelta
from uuid import UUID

import pytest
from django.utils import timezone

from deliveries.events import DeliveryStatusChanged, Location
from deliveries.models import Delivery
from outbox.handling.dispatch import dispatch
from outbox.models import OutboxMessage
from outbox.testing import hand_over, owed, pending, published
from tests.factories import BASE, delivery_request

NEW_PICKUP = {"latitude": BASE[0] + 0.02, "longitude": BASE[1] - 0.02, "altitude": 10.0}


class Story:
    """One delivery, and each status its row showed after a step, with the step's start and end."""

    def __init__(self, customer, **body):
        self.customer = customer
        self.seen: list[tuple[Delivery, datetime, datetime]] = []
        response = self.step(lambda: customer.request(delivery_request(**body)), first=True)
        assert response.status_code == 202, response.content

    def step(self, action, *, first: bool = False):
        before = timezone.now()
        result = action()
        if first:
            self.id = UUID(result.json()["deliveryId"])
        delivery = Delivery.objects.get(id=self.id)
        last = self.seen[-1][0] if self.seen else None
        if last is None or (last.status, last.status_reason) != (delivery.status, delivery.status_reason):
            self.seen.append((delivery, before, timezone.now()))
        return result

    def play(self, hold: tuple[str, ...] = ()) -> None:
        """Hand over what is due, one message to one subscriber at a time, until nothing is."""
        while due := [(s, e) for s, e in owed(correlation_id=self.id, due_only=True) if e.type not in hold]:
            subscriber, envelope = due[0]
            self.step(lambda e=envelope, s=subscriber: hand_over(e, to=s))

    def fire(self, timer: str) -> None:
        self.step(lambda: hand_over(timer, correlation_id=self.id))

    @property
    def statuses(self) -> list[tuple[str, str]]:
        return [(d.status, d.status_reason) for d, _, _ in self.seen]


def delivered(story):
    story.step(lambda: hand_over("delivery.requested", correlation_id=story.id, to="drones"))
    story.step(lambda: hand_over("drone.scheduled", correlation_id=story.id))
    story.play()


def package_first(story):
    story.step(lambda: hand_over("delivery.requested", correlation_id=story.id, to="packages"))
    story.step(lambda: hand_over("package.ready", correlation_id=story.id))
    story.play()


def late(story):
    story.play(hold=("drone.arrived",))
    Delivery.objects.filter(id=story.id).update(deadline=timezone.now() - timedelta(seconds=1))
    story.play()


def confirm(story):
    client = story.customer.client
    token = client.post(f"/api/deliveries/{story.id}/confirmation-token").json()["confirmationToken"]
    body = {"token": token, "confirmationType": "FingerPrint", "dateTime": "2026-11-30T12:00:00Z"}
    response = client.post(f"/api/deliveries/{story.id}/confirmations", body, content_type="application/json")
    assert response.status_code == 200, response.content


def confirmed(story):
    story.play(hold=("delivery.confirmation_timed_out",))
    story.step(lambda: confirm(story))
    story.play(hold=("delivery.confirmation_timed_out",))


def not_confirmed(story):
    story.play(hold=("delivery.confirmation_timed_out",))
    story.fire("delivery.confirmation_timed_out")
    story.play()


def cancelled(story):
    delivered_story_first_half(story)
    story.step(lambda: story.customer.cancel(story.id))
    story.play()


def delivered_story_first_half(story):
    story.step(lambda: hand_over("delivery.requested", correlation_id=story.id, to="drones"))
    story.step(lambda: hand_over("drone.scheduled", correlation_id=story.id))


def rescheduled(story):
    delivered_story_first_half(story)
    patch = {"pickupLocation": NEW_PICKUP}
    story.step(
        lambda: story.customer.client.patch(f"/api/deliveryrequests/{story.id}", patch, content_type="application/json")
    )
    story.play()


def planned_then_flown(story):
    story.play()
    OutboxMessage.objects.filter(type="drone.reservation_due", correlation_id=story.id).update(
        available_at=timezone.now()
    )  # its time has come
    story.play()


def planned_then_given_up(story):
    story.play()
    story.fire("delivery.wait_timed_out")
    story.play()


def join_timed_out(story):
    delivered_story_first_half(story)
    story.fire("delivery.join_timed_out")
    story.play()


def deadline_missed(story):
    story.fire("delivery.deadline_passed")
    story.play()


def unprocessable(story):
    story.step(lambda: hand_over("delivery.requested", correlation_id=story.id, to="drones"))
    [scheduled] = pending("drone.scheduled", correlation_id=story.id, to="deliveries")
    envelope = OutboxMessage.objects.get(message_id=scheduled.message_id).envelope()
    del envelope["payload"]["eta"]
    story.step(lambda: dispatch(subscriber="deliveries", body=envelope))
    story.play()


LATER = {"pickupTime": (timezone.now() + timedelta(minutes=20)).isoformat(), "deadline": None}
R, S, T, D, F = "requested", "scheduled", "in_transit", "delivered", "failed"

SCENARIOS = {
    "delivered": (delivered, {}, [(R, ""), (S, ""), (T, ""), (D, "")]),
    "package first": (package_first, {}, [(R, ""), (T, ""), (D, "")]),
    "late": (late, {}, [(R, ""), (S, ""), (T, ""), (D, "late")]),
    "confirmed": (
        confirmed,
        {"confirmationRequired": "FingerPrint"},
        [(R, ""), (S, ""), (T, ""), ("awaiting_confirmation", ""), (D, "")],
    ),
    "not confirmed": (
        not_confirmed,
        {"confirmationRequired": "FingerPrint"},
        [(R, ""), (S, ""), (T, ""), ("awaiting_confirmation", ""), (F, "confirmation_timeout")],
    ),
    "cancelled": (cancelled, {}, [(R, ""), (S, ""), ("cancelled", "cancelled_by_customer")]),
    "rescheduled": (rescheduled, {}, [(R, ""), (S, ""), (R, ""), (T, ""), (D, "")]),
    "too heavy": (package_first, {"packageInfo": {"size": "Small", "weight": 3.5}}, [(R, ""), (F, "too_heavy")]),
    "planned, then flown": (
        planned_then_flown,
        LATER,
        [(R, ""), ("waiting_for_drone", "pickup_planned"), (T, "")],  # its package was ready: it takes off
    ),
    "planned, then given up": (
        planned_then_given_up,
        LATER,
        [(R, ""), ("waiting_for_drone", "pickup_planned"), (F, "no_drone_available")],
    ),
    "join timed out": (join_timed_out, {}, [(R, ""), (S, ""), (F, "join_timeout")]),
    "deadline missed": (deadline_missed, {}, [(R, ""), (F, "deadline_missed")]),
    "unprocessable": (unprocessable, {}, [(R, ""), (F, "unprocessable")]),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_status_a_delivery_goes_through_is_announced_once_in_order(name, customer, fleet, db, settings):
    settings.DRONE_MAX_REPLANS = 0  # a planned pickup's timer reserves its drone when it fires
    drive, body, expected = SCENARIOS[name]
    story = Story(customer, **body)

    drive(story)

    assert story.statuses == expected  # the scenario takes the path it is named for
    announced = [
        DeliveryStatusChanged.model_validate(e.payload)
        for e in published("delivery.status_changed", correlation_id=story.id)
    ]
    assert [(e.status, e.status_reason) for e in announced] == story.statuses
    assert [e.change_number for e in announced] == list(range(1, len(announced) + 1))  # no gap, none twice
    assert Delivery.objects.get(pk=story.id).status_changes == len(announced)
    for event, (delivery, before, after) in zip(announced, story.seen, strict=True):
        assert (event.delivery_id, event.customer_id) == (story.id, customer.customer.id)
        assert before <= event.changed_at <= after
        location = delivery.last_known_location
        assert event.last_known_location == (None if location is None else Location(**location))
        assert (event.pickup_eta, event.delivery_eta) == (delivery.pickup_eta, delivery.eta)


def test_it_follows_the_event_that_tells_why_on_the_delivery_stream(customer, fleet, db):
    story = Story(customer)
    delivered(story)

    stream = [e.type for e in published(correlation_id=story.id) if e.stream == f"delivery:{story.id}"]
    for why in ("delivery.requested", "delivery.dispatched", "delivery.completed"):
        assert stream[stream.index(why) + 1 :].index("delivery.status_changed") >= 0
    changes = [e for e in published("delivery.status_changed", correlation_id=story.id)]
    assert all(e.stream == f"delivery:{story.id}" for e in changes)
    sequences = [e.sequence for e in changes]
    assert sequences == sorted(sequences)


def test_a_failure_with_no_change_of_status_announces_nothing(customer, fleet, db):
    story = Story(customer)
    delivered(story)

    story.fire("delivery.deadline_passed")  # fires after the end: moot
    assert len(published("delivery.status_changed", correlation_id=story.id)) == 4
