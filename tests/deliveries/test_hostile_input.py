"""Inputs that once answered 500: each is a 4xx JSON naming the field, and nothing is stored.

The suite runs on SQLite by default and on PostgreSQL under `bash .ci/run`: the same table on both.
"""

import json

import pytest

from deliveries.models import Delivery
from outbox.testing import published
from tests.factories import delivery_request

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
    "a right-to-left override in the tag": (with_package(tag="skoob\u202e"), "packageInfo.tag"),
    "a zero-width space in the tag": (with_package(tag="bo\u200boks"), "packageInfo.tag"),
    "the smallest float as a weight": (with_package(weight=5e-324), "packageInfo.weight"),
    # Wrong types are refused, not coerced into something else.
    "expedited as a string": (delivery_request(expedited="true"), "expedited"),
    "expedited as a number": (delivery_request(expedited=0), "expedited"),
    "latitude as false": (with_pickup(latitude=False), "pickupLocation.latitude"),
    "latitude as a string": (with_pickup(latitude="47.6"), "pickupLocation.latitude"),
    "pickupTime as a number": (delivery_request(pickupTime=0), "pickupTime"),
    "an altitude beyond any flight": (with_pickup(altitude=1e12), "pickupLocation.altitude"),
    "an unknown field": (delivery_request(pickuptime="2026-01-01T00:00:00Z"), "pickuptime"),
    "a field by its Python name": (
        {**{k: v for k, v in delivery_request().items() if k != "pickupTime"}, "pickup_time": "2026-12-01T00:00:00Z"},
        "pickup_time",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE_BODIES))
def test_a_hostile_body_is_refused_with_422_naming_the_field_and_stores_nothing(customer, case):
    body, field = HOSTILE_BODIES[case]
    response = customer.client.post(
        "/api/deliveryrequests", json.dumps(body, allow_nan=True), content_type="application/json"
    )

    assert response.status_code == 422, response.content
    assert field in [error["field"] for error in response.json()["errors"]]
    assert not Delivery.objects.exists() and published() == []


def test_an_empty_idempotency_key_is_refused_every_time_and_stores_nothing(customer):
    for _ in range(2):
        response = customer.request(delivery_request(), **{"Idempotency-Key": ""})
        assert response.status_code == 422, response.content
        assert "Idempotency-Key" in response.json()["detail"]
    assert not Delivery.objects.exists()


def test_a_nul_in_the_idempotency_key_is_refused(customer):
    response = customer.request(delivery_request(), **{"Idempotency-Key": "a\x00b"})

    assert response.status_code == 422, response.content
    assert not Delivery.objects.exists()


@pytest.mark.parametrize("field", ["pickupTime", "deadline", "pickupLocation", "dropOffLocation"])
def test_a_reschedule_to_null_is_refused_not_read_as_no_change(customer, field):
    delivery_id = customer.request().json()["deliveryId"]
    before = published()

    response = customer.client.patch(
        f"/api/deliveryrequests/{delivery_id}", json.dumps({field: None}), content_type="application/json"
    )

    assert response.status_code == 422, response.content
    assert response.json()["errors"][0]["field"] == field
    assert published() == before


def test_a_page_beyond_any_offset_is_refused(customer):
    response = customer.get("/deliveries?page=1000000000000000000")

    assert response.status_code == 422, response.content
    assert response.json()["errors"][0]["field"] == "page"


def test_an_empty_reschedule_is_refused_by_the_rule_the_schema_states(customer):
    delivery_id = customer.request().json()["deliveryId"]
    response = customer.client.patch(f"/api/deliveryrequests/{delivery_id}", "{}", content_type="application/json")

    assert response.status_code == 422, response.content
    schema = customer.client.get("/api/openapi.json").json()
    assert schema["components"]["schemas"]["DeliveryRescheduleIn"]["minProperties"] == 1


def test_a_method_a_path_does_not_serve_answers_json_405_with_allow(customer):
    response = customer.client.put("/api/deliveries")

    assert response.status_code == 405
    assert response["Content-Type"] == "application/json"
    assert response["Allow"] == "GET"
    assert response.json()["errors"][0]["field"] == "method"


@pytest.mark.parametrize("path", ["/api/nothing-here", "/api/deliveries/x/y/z"])
def test_an_unknown_path_under_the_api_answers_json_404(customer, path):
    response = customer.client.get(path)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["errors"] == [{"field": "path", "message": "not found"}]


def posted(customer, raw: str):
    return customer.client.post("/api/deliveryrequests", raw, content_type="application/json")


def test_a_key_twice_in_one_object_is_refused_naming_the_key(customer):
    raw = json.dumps(delivery_request())[:-1] + ', "expedited": true}'  # "expedited" a second time
    response = posted(customer, raw)

    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "expedited", "message": "appears twice in one object"}]
    assert not Delivery.objects.exists()


def test_json_nested_deeper_than_any_request_is_a_400_naming_the_body(customer, settings):
    settings.DEBUG = True  # where the recursion error's text once leaked into the answer
    response = posted(customer, "[" * 5000 + "]" * 5000)

    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "body", "message": "the JSON is nested too deeply"}]


@pytest.mark.parametrize("raw", ["{", "not json", '{"a": }'])
def test_an_unparseable_body_names_the_body(customer, raw):
    response = posted(customer, raw)

    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["body"]


def test_another_customers_delivery_is_a_404_naming_the_delivery(customer, other_customer):
    delivery_id = customer.request().json()["deliveryId"]

    response = other_customer.get(f"/deliveries/{delivery_id}")

    assert response.status_code == 404
    assert response.json()["errors"] == [{"field": "deliveryId", "message": "no such delivery of yours"}]
