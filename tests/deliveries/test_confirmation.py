"""Proof of delivery with a task token: a delivery that asks for a confirmation waits
for its single-use token when the drone arrives; without it in time it fails and the drone takes
the package back."""

import hashlib
import json
from uuid import UUID

import pytest

from deliveries.models import Delivery
from drones.models import Drone
from outbox.testing import hand_over, published, run_choreography
from packages.models import Package
from tests.factories import arrived_after_the_deadline, delivery_request


def requested(customer, kind: str = "FingerPrint") -> UUID:
    response = customer.request(delivery_request(confirmationRequired=kind))
    assert response.status_code == 202, response.content
    return UUID(response.json()["deliveryId"])


def at_the_drop_off(customer, kind: str = "FingerPrint") -> UUID:
    delivery_id = requested(customer, kind)
    run_choreography(correlation_id=delivery_id, hold=("delivery.confirmation_timed_out",))
    assert Delivery.objects.get(id=delivery_id).status == "awaiting_confirmation"
    return delivery_id


def issued_token(customer, delivery_id) -> str:
    response = customer.client.post(f"/api/deliveries/{delivery_id}/confirmation-token")
    assert response.status_code == 201, response.content
    return response.json()["confirmationToken"]


def confirm(customer, delivery_id, **overrides):
    body = {
        "token": overrides.pop("token", None) or issued_token(customer, delivery_id),
        "confirmationType": "FingerPrint",
        "dateTime": "2026-11-30T12:00:00Z",
        "geoCoordinates": {"latitude": 47.6, "longitude": -122.3},
        "confirmationBlob": "bWludXRpYWU=",
        **overrides,
    }
    return customer.client.post(
        f"/api/deliveries/{delivery_id}/confirmations", json.dumps(body), content_type="application/json"
    )


def test_the_token_completes_the_delivery_and_never_leaves_the_context(customer, fleet, db):
    delivery_id = at_the_drop_off(customer)
    delivery = Delivery.objects.get(id=delivery_id)
    token = issued_token(customer, delivery_id)
    assert len(token) >= 40 and "confirmationToken" not in customer.get(f"/deliveries/{delivery_id}").json()
    (asked,) = published("delivery.confirmation_requested", correlation_id=delivery_id)
    assert asked.payload == {
        "delivery_id": str(delivery_id),
        "token_id": str(delivery.confirmation_token_id),
        "confirmation_type": "FingerPrint",
    }
    assert not [e for e in published() if token in e.model_dump_json()]
    assert Drone.objects.filter(status="in_flight").count() == 1  # it waits at the drop-off

    response = confirm(customer, delivery_id, token=token)

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "delivered"
    assert len(published("delivery.completed", correlation_id=delivery_id)) == 1
    run_choreography(correlation_id=delivery_id, hold=("delivery.confirmation_timed_out",))
    assert Drone.objects.filter(status="available").count() == 3
    assert Package.objects.get(delivery_id=delivery_id).status == "delivered"
    assert Delivery.objects.get(id=delivery_id).confirmation["type"] == "FingerPrint"


def test_a_wrong_token_changes_nothing_and_a_used_one_opens_nothing_again(customer, fleet, db):
    delivery_id = at_the_drop_off(customer)
    token = issued_token(customer, delivery_id)

    wrong = confirm(customer, delivery_id, token="x" * 43)
    assert wrong.status_code == 403 and wrong.json()["errors"][0]["field"] == "token"
    assert Delivery.objects.get(id=delivery_id).status == "awaiting_confirmation"
    assert confirm(customer, delivery_id, token=token).status_code == 200

    reused = confirm(customer, delivery_id, token=token)
    assert reused.status_code == 409 and reused.json()["errors"][0]["field"] == "status"
    assert len(published("delivery.completed", correlation_id=delivery_id)) == 1


def test_no_token_confirms_a_delivery_before_one_was_ever_issued(customer, fleet, db):
    delivery_id = at_the_drop_off(customer)
    assert Delivery.objects.get(id=delivery_id).confirmation_token_hash == ""  # nobody asked for a token yet

    for guess in ("x" * 43, "a"):
        response = confirm(customer, delivery_id, token=guess)
        assert response.status_code == 403, (guess, response.content)
        assert response.json()["errors"][0]["field"] == "token"

    assert Delivery.objects.get(id=delivery_id).status == "awaiting_confirmation"
    assert not published("delivery.completed", correlation_id=delivery_id)
    assert confirm(customer, delivery_id).status_code == 200  # a token issued now still works


def test_a_wrong_confirmation_type_is_422_and_changes_nothing(customer, fleet, db):
    delivery_id = at_the_drop_off(customer)

    response = confirm(customer, delivery_id, confirmationType="Voice")

    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "confirmationType"
    assert Delivery.objects.get(id=delivery_id).status == "awaiting_confirmation"


def test_another_customer_cannot_confirm(customer, other_customer, fleet, db):
    delivery_id = at_the_drop_off(customer)
    token = issued_token(customer, delivery_id)

    response = other_customer.client.post(
        f"/api/deliveries/{delivery_id}/confirmations",
        json.dumps({"token": token, "confirmationType": "FingerPrint", "dateTime": "2026-11-30T12:00:00Z"}),
        content_type="application/json",
    )

    assert response.status_code == 404
    assert Delivery.objects.get(id=delivery_id).status == "awaiting_confirmation"


def test_no_confirmation_in_time_fails_it_and_the_drone_brings_the_package_back(customer, fleet, db):
    delivery_id = at_the_drop_off(customer)
    token = issued_token(customer, delivery_id)

    hand_over("delivery.confirmation_timed_out", correlation_id=delivery_id)
    run_choreography(correlation_id=delivery_id)

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("failed", "confirmation_timeout")
    (returned,) = published("drone.package_returned", correlation_id=delivery_id)
    assert returned.payload["reason"] == "confirmation_timeout"
    assert "package_returned" in delivery.compensations and "drone_released" in delivery.compensations
    assert Drone.objects.filter(status="available").count() == 3
    assert confirm(customer, delivery_id, token=token).status_code == 409


def test_a_late_arrival_that_awaits_its_confirmation_is_late_too(customer, fleet, db):
    delivery_id = requested(customer)
    arrived_after_the_deadline(delivery_id)

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("awaiting_confirmation", "late")
    assert customer.get(f"/deliveries/{delivery_id}/status").json()["statusReason"] == "late"
    assert confirm(customer, delivery_id).status_code == 200
    assert Delivery.objects.get(id=delivery_id).status_reason == "late"  # confirmed, still not on time


@pytest.mark.parametrize("kind", ["None"])
def test_a_delivery_without_confirmation_is_delivered_on_arrival_as_before(customer, fleet, db, kind):
    delivery_id = requested(customer, kind)
    run_choreography(correlation_id=delivery_id)

    assert Delivery.objects.get(id=delivery_id).status == "delivered"
    assert not published("delivery.confirmation_requested", correlation_id=delivery_id)


def test_only_the_tokens_hash_is_stored_and_asking_again_replaces_the_token(customer, fleet, db):
    delivery_id = at_the_drop_off(customer)
    first = issued_token(customer, delivery_id)
    second = issued_token(customer, delivery_id)

    stored = Delivery.objects.get(id=delivery_id).confirmation_token_hash
    assert first != second and stored == hashlib.sha256(second.encode()).hexdigest()
    assert first not in stored and second not in stored
    replaced = confirm(customer, delivery_id, token=first)
    assert replaced.status_code == 403  # replaced: it opens nothing, and the answer does not deny it was issued
    assert replaced.json()["errors"] == [
        {
            "field": "token",
            "message": "not this delivery's current confirmation token: asking for a token replaces the one before",
        }
    ]
    assert confirm(customer, delivery_id, token=second).status_code == 200
    late = customer.client.post(f"/api/deliveries/{delivery_id}/confirmation-token")
    assert late.status_code == 409 and late.json()["errors"][0]["field"] == "status"


def test_a_token_asked_for_too_early_says_not_yet_and_one_never_needed_says_so(customer, fleet):
    early = customer.client.post(f"/api/deliveries/{requested(customer)}/confirmation-token")
    assert early.status_code == 409
    assert early.json()["errors"] == [{"field": "status", "message": "not_yet_arrived"}]
    assert early.json()["detail"].startswith("the delivery is requested: its drone has not reached the drop-off")

    never = customer.client.post(f"/api/deliveries/{requested(customer, 'None')}/confirmation-token")
    assert never.status_code == 409
    assert never.json()["errors"] == [{"field": "status", "message": "no_confirmation_required"}]


def test_a_token_asked_for_in_flight_says_the_drone_has_not_arrived_not_that_it_is_not_in_transit(customer, fleet, db):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("drone.arrived",))
    assert Delivery.objects.get(id=delivery_id).status == "in_transit"

    early = customer.client.post(f"/api/deliveries/{delivery_id}/confirmation-token")

    assert early.status_code == 409
    assert early.json()["errors"] == [{"field": "status", "message": "not_yet_arrived"}]
    assert early.json()["detail"].startswith("the delivery is in_transit: its drone has not reached the drop-off")
