"""Inputs that once answered 500 (issue 10): each is a 4xx JSON naming the field, and nothing is stored.

The suite runs on SQLite by default and on PostgreSQL under `bash .ci/run`: the same table on both.
"""

import json

import pytest

from deliveries.models import Delivery
from outbox.models import OutboxMessage
from tests.deliveries.conftest import delivery_request

pytestmark = pytest.mark.django_db(transaction=True)


def with_package(**package) -> dict:
    body = delivery_request()
    body["packageInfo"] = {**body["packageInfo"], **package}
    return body


def with_pickup(**location) -> dict:
    body = delivery_request()
    body["pickupLocation"] = {**body["pickupLocation"], **location}
    return body


HOSTILE_BODIES = {
    "a pickup in year 9999": (delivery_request(pickupTime="9999-12-31T23:00:00-05:00"), "pickupTime"),
    "a deadline in year 9999": (delivery_request(deadline="9999-12-31T23:00:00-05:00"), "deadline"),
    "a pickup a year ahead": (delivery_request(pickupTime="2027-12-01T00:00:00+00:00"), "pickupTime"),
    "a pickup in 2020": (delivery_request(pickupTime="2020-01-01T00:00:00+00:00"), "pickupTime"),
    "NaN altitude": (with_pickup(altitude=float("nan")), "pickupLocation.altitude"),
    "infinite latitude": (with_pickup(latitude=float("inf")), "pickupLocation.latitude"),
    "NaN weight": (with_package(weight=float("nan")), "packageInfo.weight"),
    "a NUL in the tag": (with_package(tag="a\u0000b"), "packageInfo.tag"),
    "a newline in the tag": (with_package(tag="a\nb"), "packageInfo.tag"),
}


@pytest.mark.parametrize("case", list(HOSTILE_BODIES))
def test_a_hostile_body_is_refused_with_422_naming_the_field_and_stores_nothing(customer, case):
    body, field = HOSTILE_BODIES[case]
    response = customer.client.post(
        "/api/deliveryrequests", json.dumps(body, allow_nan=True), content_type="application/json"
    )

    assert response.status_code == 422, response.content
    assert field in [error["field"] for error in response.json()["errors"]]
    assert not Delivery.objects.exists() and not OutboxMessage.objects.exists()


def test_an_empty_idempotency_key_is_refused_every_time_and_stores_nothing(customer):
    for _ in range(2):
        response = customer.request(delivery_request(), **{"Idempotency-Key": ""})
        assert response.status_code == 422, response.content
        assert "Idempotency-Key" in response.json()["detail"]
    assert not Delivery.objects.exists()


def test_a_page_beyond_any_offset_is_refused(customer):
    response = customer.get("/deliveries?page=1000000000000000000")

    assert response.status_code == 422, response.content
    assert response.json()["errors"][0]["field"] == "page"


@pytest.mark.parametrize("path", ["/api/nothing-here", "/api/deliveries/x/y/z"])
def test_an_unknown_path_under_the_api_answers_json_404(customer, path):
    response = customer.client.get(path)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["errors"] == [{"field": "path", "message": "not found"}]
