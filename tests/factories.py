"""What tests build again and again: a valid request body, an API customer, a delivery requested."""

from datetime import timedelta
from uuid import UUID

from django.test import Client
from django.utils import timezone

from deliveries.customers import create_customer
from outbox.models import DeadLetter
from outbox.testing import hand_over, pending, run_choreography

# What ships in the wheel: the deployable, the kernel and the contexts.
# What the project's wheel holds; the kernel (outbox) ships as a distribution of its own (kernel/).
PRODUCT_PACKAGES = frozenset(
    {"delivery_project", "common", "packages", "drones", "deliveries", "notifications", "webhooks"}
)

BASE = (47.6205, -122.3493)


def delivery_request(**overrides) -> dict:
    """A valid Fabrikam ingestion body, near the test fleet's base."""
    body = {
        "pickupLocation": {"latitude": BASE[0] + 0.01, "longitude": BASE[1], "altitude": 0},
        "dropOffLocation": {"latitude": BASE[0] - 0.01, "longitude": BASE[1] + 0.01},
        "pickupTime": timezone.now().isoformat(),
        "deadline": (timezone.now() + timedelta(hours=2)).isoformat(),
        "expedited": False,
        "confirmationRequired": "None",
        "packageInfo": {"size": "Small", "weight": 1.5, "tag": "books"},
    }
    body.update(overrides)
    return body


class Customer:
    """A customer with a token, calling the API through Django's test client."""

    def __init__(self, name: str):
        self.customer, self.token = create_customer(name=name)
        self.client = Client(headers={"Authorization": f"Bearer {self.token}"})

    def request(self, body: dict | None = None, **headers):
        return self.client.post(
            "/api/deliveryrequests", body or delivery_request(), content_type="application/json", headers=headers
        )

    def get(self, path: str):
        return self.client.get(f"/api{path}")

    def cancel(self, delivery_id):
        return self.client.delete(f"/api/deliveryrequests/{delivery_id}")


def requested(customer) -> UUID:
    response = customer.request()
    assert response.status_code == 202, response.json()
    return UUID(response.json()["deliveryId"])


def dead_letter_then_replay(delivery_id: UUID) -> DeadLetter:
    """Take the delivery to its end with notifications failing `delivery.dispatched` (dead-lettered
    at once outside a worker), then replay the letter and process the replay: a delivery whose
    story holds a red copy and its replay. The letter, as it is after the replay."""
    from outbox.console.dead_letter_actions import replay_dead_letter
    from outbox.handling.dispatch import dispatch
    from outbox.testing import failing

    run_choreography(correlation_id=delivery_id, hold=("delivery.dispatched",))
    [dispatched] = pending("delivery.dispatched", correlation_id=delivery_id)
    with failing("notifications", "delivery.dispatched", RuntimeError("the SMS gateway is down")):
        hand_over(dispatched, dead_letters="keep")
    run_choreography(correlation_id=delivery_id)
    letter = DeadLetter.objects.get(subscriber="notifications", type="delivery.dispatched", correlation_id=delivery_id)
    dispatch(subscriber="notifications", body=replay_dead_letter(letter_id=letter.pk, by="operator").envelope())
    letter.refresh_from_db()
    return letter


def notification_dead_letters_then_replays(customer) -> UUID:
    """A delivery flown to the end whose notify-me messages (e-mail and SMS) failed, each
    `notification.due` dead-lettered on the notifications lane's loop, then replayed: its id."""
    from outbox.console.dead_letter_actions import replay_dead_letter
    from outbox.handling.dispatch import dispatch
    from outbox.testing import failing

    delivery_id = requested(customer)
    asked = customer.client.post(
        f"/api/deliveries/{delivery_id}/notifymerequests",
        {"emailAddress": "alice@example.com", "sms": "+14255550123"},
        content_type="application/json",
    )
    assert asked.status_code == 201, asked.content
    run_choreography(correlation_id=delivery_id, hold=("notification.due",))
    with failing("notifications", "notification.due", RuntimeError("the SMTP server is down")):
        hand_over("notification.due", correlation_id=delivery_id, dead_letters="keep")
    for letter in DeadLetter.objects.filter(subscriber="notifications", correlation_id=delivery_id):
        dispatch(subscriber="notifications", body=replay_dead_letter(letter_id=letter.pk, by="operator").envelope())
    return delivery_id


def arrived_after_the_deadline(delivery_id: UUID):
    """Run the delivery's choreography up to its drone's arrival, move its deadline into the past,
    then hand the arrival over; the `drone.arrived` event it handed over."""
    from deliveries.models import Delivery

    run_choreography(correlation_id=delivery_id, hold=("drone.arrived",))
    Delivery.objects.filter(id=delivery_id).update(deadline=timezone.now() - timedelta(seconds=1))
    (arrived,) = pending("drone.arrived", correlation_id=delivery_id)
    hand_over(arrived)
    return arrived
