"""The customer API: the ingestion contract, ownership, and clear errors for bad input."""

import io
import json
import logging
import threading
from datetime import timedelta
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from deliveries.models import Delivery
from outbox.models import OutboxMessage
from outbox.testing import published
from tests.factories import delivery_request


def test_a_request_is_accepted_with_202_and_its_event_in_the_same_transaction(customer):
    response = customer.request()

    assert response.status_code == 202
    body = response.json()
    delivery_id = UUID(body["deliveryId"])
    assert body["status"] == "requested"
    assert body["packageInfo"]["size"] == "Small" and body["packageInfo"]["weight"] == 1.5
    assert UUID(body["packageInfo"]["packageId"])
    assert body["dropOffLocation"]["longitude"] == pytest.approx(-122.3393)
    assert response.headers["Location"] == f"/api/deliveries/{delivery_id}"
    event = OutboxMessage.objects.get(type="delivery.requested")
    assert (event.correlation_id, event.payload["delivery_id"]) == (delivery_id, str(delivery_id))
    changed = OutboxMessage.objects.get(type="delivery.status_changed")
    assert (changed.correlation_id, changed.payload["status"]) == (delivery_id, "requested")
    timers = OutboxMessage.objects.exclude(type__in=["delivery.requested", "delivery.status_changed"])
    assert sorted(timers.values_list("type", flat=True)) == ["delivery.deadline_passed", "delivery.join_timed_out"]
    assert all(t.available_at > event.available_at for t in timers)


def test_a_repeated_idempotency_key_gets_the_first_answer_and_creates_nothing(customer, caplog):
    caplog.set_level(logging.INFO, logger="deliveries.api")
    body = delivery_request()
    first = customer.request(body, **{"Idempotency-Key": "k1"})
    same_request = dict(reversed(list(body.items())))  # the same JSON, its keys in another order
    again = customer.request(same_request, **{"Idempotency-Key": "k1"})

    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert Delivery.objects.count() == 1
    assert len(published("delivery.requested")) == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "deliveries.api"]
    delivery_id = first.json()["deliveryId"]
    assert lines == [
        f"delivery {delivery_id} accepted",  # once: the repeat accepted nothing
        f"delivery {delivery_id}: Idempotency-Key repeated, its first answer sent again",
    ]
    assert customer.request(**{"Idempotency-Key": "k2"}).json()["deliveryId"] != first.json()["deliveryId"]


def test_a_request_repeated_after_a_reschedule_is_answered_what_was_accepted_first(customer):
    """The answer to a repeat is the first answer: what was accepted, not the delivery as it is now."""
    body = delivery_request()
    first = customer.request(body, **{"Idempotency-Key": "k1"})
    delivery_id = first.json()["deliveryId"]
    later = (timezone.now() + timedelta(minutes=30)).isoformat()
    moved = customer.client.patch(
        f"/api/deliveryrequests/{delivery_id}", {"pickupTime": later}, content_type="application/json"
    )
    assert moved.status_code == 202, moved.json()

    again = customer.request(body, **{"Idempotency-Key": "k1"})

    assert (again.status_code, again.json()) == (202, first.json())
    assert customer.get(f"/deliveries/{delivery_id}").json()["pickupTime"] != first.json()["pickupTime"]


def test_the_same_idempotency_key_with_a_different_request_is_refused_and_takes_nothing(customer):
    small = delivery_request()
    large = {**small, "packageInfo": {"size": "Large", "weight": 9, "tag": "books"}}
    assert customer.request(small, **{"Idempotency-Key": "k1"}).status_code == 202

    second = customer.request(large, **{"Idempotency-Key": "k1"})

    assert second.status_code == 422  # the client learns its second order was not taken
    assert second.json()["errors"] == [
        {"field": "Idempotency-Key", "message": "this Idempotency-Key was used for a different request"}
    ]
    assert Delivery.objects.count() == 1 and Delivery.objects.get().package_size == "Small"


@pytest.mark.postgres
def test_a_duplicate_sent_while_the_first_is_still_in_its_transaction_gets_409(customer, transactional_db, monkeypatch):
    from deliveries import services

    body, inside, go, answers = delivery_request(), threading.Event(), threading.Event(), {}
    timers_to_set = services.timers_to_set

    def timers_then_pause(delivery, **kwargs):
        timers = timers_to_set(delivery, **kwargs)
        if threading.current_thread().name == "first":
            inside.set()
            go.wait(20)  # the first request's transaction is open, its key held
        return timers

    monkeypatch.setattr(services, "timers_to_set", timers_then_pause)

    def send(name):
        try:
            client = Client(headers={"Authorization": f"Bearer {customer.token}"})
            answers[name] = client.post(
                "/api/deliveryrequests", body, content_type="application/json", headers={"Idempotency-Key": "k1"}
            )
        finally:
            connection.close()

    first = threading.Thread(target=send, args=("first",), name="first")
    first.start()
    try:
        assert inside.wait(20)
        send("second")
    finally:
        go.set()
        first.join(30)

    assert answers["second"].status_code == 409
    assert answers["second"].json()["errors"][0]["field"] == "Idempotency-Key"
    assert answers["first"].status_code == 202
    assert customer.request(body, **{"Idempotency-Key": "k1"}).json() == answers["first"].json()  # then, the answer
    assert Delivery.objects.count() == 1


def test_a_customer_lists_and_reads_their_own_deliveries(customer):
    ids = [customer.request().json()["deliveryId"] for _ in range(3)]

    listing = customer.get("/deliveries").json()
    assert listing["count"] == 3
    assert [d["deliveryId"] for d in listing["items"]] == ids[::-1]  # newest first
    one = customer.get(f"/deliveries/{ids[0]}").json()
    assert one["status"] == "requested" and one["droneId"] is None and one["createdAt"]
    status = customer.get(f"/deliveries/{ids[0]}/status").json()
    assert status == {
        "status": "requested",
        "statusReason": None,
        "lastKnownLocation": None,
        "pickupEta": None,
        "deliveryEta": None,
    }


def test_the_list_is_paginated(customer):
    for _ in range(21):
        customer.request()

    second = customer.get("/deliveries?page=2").json()

    assert second["count"] == 21 and len(second["items"]) == 1


@pytest.mark.parametrize("path", ["/deliveries/{id}", "/deliveries/{id}/status", "/deliveries/{id}/timeline"])
def test_another_customers_delivery_is_404(customer, other_customer, path):
    delivery_id = customer.request().json()["deliveryId"]

    response = other_customer.get(path.format(id=delivery_id))

    assert response.status_code == 404
    assert other_customer.get("/deliveries").json()["count"] == 0


def test_a_second_cancel_answers_as_the_first_and_announces_nothing_more(customer):
    """docs/api.md promises 409 once finished; the code answers a retried DELETE as the first
    (now what the docs say too), and 409 only for a delivery that left or ended otherwise."""
    delivery_id = customer.request().json()["deliveryId"]

    first, again = customer.cancel(delivery_id), customer.cancel(delivery_id)

    assert (first.status_code, again.status_code) == (202, 202) and first.json() == again.json()
    assert len(published("delivery.cancelled", correlation_id=UUID(delivery_id))) == 1
    Delivery.objects.filter(id=delivery_id).update(status="failed")  # ended otherwise: too late to cancel
    refused = customer.cancel(delivery_id)
    assert refused.status_code == 409 and refused.json()["errors"][0]["field"] == "status"


def test_another_customer_cannot_cancel_a_delivery(customer, other_customer):
    delivery_id = customer.request().json()["deliveryId"]

    assert other_customer.cancel(delivery_id).status_code == 404
    assert Delivery.objects.get(id=delivery_id).status == "requested"


# Nobody's delivery; a constant, not a uuid4() per collection: pytest-xdist's workers each collect
# the tests and must find the same ids.
SOMEONES_DELIVERY = "940f8fae-1d81-4f01-bc51-accef99d5424"


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-token", "Basic dXNlcjpwYXNz"])
@pytest.mark.parametrize(
    ("method", "path"),
    [("post", "/api/deliveryrequests"), ("get", "/api/deliveries"), ("get", f"/api/deliveries/{SOMEONES_DELIVERY}")],
)
def test_no_valid_token_is_401(db, authorization, method, path):
    headers = {"Authorization": authorization} if authorization else {}
    response = getattr(Client(), method)(
        path,
        headers=headers,
        content_type="application/json",
        data=json.dumps(delivery_request()) if method == "post" else None,
    )

    assert response.status_code == 401
    assert response.json()["errors"][0]["field"] == "Authorization"
    assert response["WWW-Authenticate"].startswith("Bearer")


def _without(body: dict, dotted: str) -> dict:
    body = json.loads(json.dumps(body))
    *parents, leaf = dotted.split(".")
    target = body
    for key in parents:
        target = target[key]
    del target[leaf]
    return body


def _with(dotted: str, value) -> dict:
    body = delivery_request()
    *parents, leaf = dotted.split(".")
    target = body
    for key in parents:
        target = target[key]
    target[leaf] = value
    return body


BAD_BODIES = [
    ("weight zero", _with("packageInfo.weight", 0), 422, "packageInfo.weight"),
    ("weight negative", _with("packageInfo.weight", -2), 422, "packageInfo.weight"),
    ("weight not a number", _with("packageInfo.weight", "heavy"), 422, "packageInfo.weight"),
    ("latitude above 90", _with("pickupLocation.latitude", 91), 422, "pickupLocation.latitude"),
    ("latitude below -90", _with("dropOffLocation.latitude", -90.5), 422, "dropOffLocation.latitude"),
    ("longitude outside", _with("dropOffLocation.longitude", 181), 422, "dropOffLocation.longitude"),
    ("unknown size", _with("packageInfo.size", "Huge"), 422, "packageInfo.size"),
    ("deadline before pickup", _with("deadline", "2000-01-01T00:00:00Z"), 422, "deadline"),
    ("pickup time not a date", _with("pickupTime", "tomorrow-ish"), 422, "pickupTime"),
    ("pickup time long past", _with("pickupTime", "2020-06-01T10:00:00Z"), 422, "pickupTime"),
    ("unknown confirmation", _with("confirmationRequired", "Telepathy"), 422, "confirmationRequired"),
    ("missing package info", _without(delivery_request(), "packageInfo"), 422, "packageInfo"),
    ("missing pickup location", _without(delivery_request(), "pickupLocation"), 422, "pickupLocation"),
    ("location not an object", _with("pickupLocation", "Seattle"), 422, "pickupLocation"),
]


@pytest.mark.parametrize(("case", "body", "status", "field"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
def test_bad_input_gets_a_4xx_naming_the_field(customer, case, body, status, field):
    response = customer.client.post("/api/deliveryrequests", json.dumps(body), content_type="application/json")

    assert response.status_code == status, response.content
    fields = [e["field"] for e in response.json()["errors"]]
    assert any(f == field or f.startswith(f"{field}.") for f in fields), fields
    assert Delivery.objects.count() == 0 and published() == []


@pytest.mark.parametrize(
    ("case", "data", "content_type", "status", "field"),
    [
        ("malformed JSON", b'{"pickupLocation": ', "application/json", 400, "body"),
        ("JSON but not an object", b"[1, 2]", "application/json", 400, "body"),
        ("wrong content type", b"pickupTime=now", "application/x-www-form-urlencoded", 415, "Content-Type"),
        ("plain text", b"deliver it", "text/plain", 415, "Content-Type"),
        (
            "body over 64 KiB",
            json.dumps({**delivery_request(), "pad": "x" * 70_000}).encode(),
            "application/json",
            413,
            "body",
        ),
        ("empty body", b"", "application/json", 422, "body"),
    ],
    # By case: the body over 64 KiB holds the time, and every pytest-xdist process must collect the same ids.
    ids=["malformed JSON", "JSON but not an object", "wrong content type", "plain text", "body over 64 KiB", "empty"],
)
def test_unreadable_bodies_get_a_4xx_naming_what_is_wrong(customer, case, data, content_type, status, field):
    response = customer.client.post("/api/deliveryrequests", data, content_type=content_type)

    assert response.status_code == status, response.content
    assert field in [e["field"] for e in response.json()["errors"]]
    assert Delivery.objects.count() == 0


def test_an_unreadable_chunked_body_is_a_411_naming_content_length(customer):
    """A body sent chunked (no Content-Length) was read as empty: `body: Field required`.
    runserver cannot read one (gunicorn can: tests/e2e/test_production_mode.py)."""
    chunked = {"HTTP_TRANSFER_ENCODING": "chunked", "CONTENT_LENGTH": ""}
    body = json.dumps(delivery_request())

    refused = customer.client.post("/api/deliveryrequests", body, content_type="application/json", **chunked)
    assert refused.status_code == 411 and refused.json()["errors"][0]["field"] == "Content-Length"

    # As gunicorn hands it over: the chunks decoded, the stream ended where the body does.
    read = {**chunked, "wsgi.input_terminated": True, "wsgi.input": io.BytesIO(body.encode())}
    accepted = customer.client.post("/api/deliveryrequests", body, content_type="application/json", **read)
    assert accepted.status_code == 202, accepted.content
    assert Delivery.objects.count() == 1


@pytest.mark.parametrize("path", ["/api/deliveries/not-a-uuid", "/api/deliveries/not-a-uuid/status"])
def test_a_malformed_id_is_a_4xx_not_a_500_and_is_named_as_every_other_error_names_it(customer, path):
    response = customer.client.get(path)
    assert response.status_code == 422
    assert [error["field"] for error in response.json()["errors"]] == ["deliveryId"]


def test_a_validators_message_reaches_the_client_without_pydantics_prefix(customer):
    response = customer.request(delivery_request(pickupTime=0))  # a number is no timestamp
    assert response.status_code == 422
    [error] = response.json()["errors"]
    assert error == {
        "field": "pickupTime",
        "message": "must be an ISO 8601 date-time string, like 2026-12-07T10:00:00Z",
    }


@pytest.mark.parametrize(
    ("path", "body", "field", "message"),
    [
        ("/api/deliveries/nonsense", None, "deliveryId", "must be a UUID, like 3fa85f64-5717-4562-b3fc-2c963f66afa6"),
        ("/api/deliveryrequests", {"pickupLocation": "Seattle"}, "pickupLocation", "must be a JSON object"),
        (
            "/api/deliveryrequests",
            {"pickupTime": "nonsense"},
            "pickupTime",
            "must be an ISO 8601 date-time string, like 2026-12-07T10:00:00Z",
        ),
        (
            "/api/deliveryrequests",
            {"pickupTime": "2026-13-01T10:00:00Z"},
            "pickupTime",
            "month value is outside expected range of 1-12",
        ),
        ("/api/deliveryrequests", {"expedited": "maybe"}, "expedited", "must be true or false"),
        (
            "/api/deliveryrequests",
            {"packageInfo": {"size": "Huge", "weight": 1, "tag": "x"}},
            "packageInfo.size",
            "must be one of 'Small', 'Medium' or 'Large'",
        ),
        (
            "/api/deliveryrequests",
            {"dropOffLocation": {"latitude": 47.6, "longitude": 500}},
            "dropOffLocation.longitude",
            "must be at most 180",
        ),
        ("/api/deliveryrequests", {"dropOffLocation": None}, "dropOffLocation", "must be a JSON object"),
    ],
)
def test_a_refused_field_is_told_the_apis_rule_not_how_pydantics_parser_failed(customer, path, body, field, message):
    """Not "invalid character: found `n` at 0" nor "a valid dictionary or object to extract fields from"."""
    response = customer.client.get(path) if body is None else customer.request(delivery_request(**body))
    assert response.status_code == 422
    [error] = [error for error in response.json()["errors"] if error["field"] == field]
    assert message in error["message"]
    assert "Input should" not in error["message"] and "found `" not in error["message"]


def test_a_missing_field_and_an_unknown_one_are_named_in_plain_words(customer):
    body = delivery_request(colour="red")
    del body["pickupTime"]
    response = customer.request(body)
    assert response.status_code == 422
    assert {e["field"]: e["message"] for e in response.json()["errors"]} == {
        "pickupTime": "required",
        "colour": "not a field of this request",
    }


def test_the_contract_says_what_a_drone_carries_by_size_where_a_client_reads_it(db, settings):
    """A heavier package is accepted and fails later (the packages context decides): the schema and
    docs/api.md say so, with the limits, so that a client is not surprised by `too_heavy`."""
    schema = Client().get("/api/openapi.json").json()["components"]["schemas"]
    described = schema["PackageInfoIn"]["properties"]["weight"]["description"]
    api_md = (Path(settings.BASE_DIR) / "docs" / "api.md").read_text()
    for size, limit in settings.PACKAGE_MAX_WEIGHT_KG.items():
        assert f"{size} {limit:g} kg" in described and f"{size} {limit:g} kg" in api_md
    assert "too_heavy" in described and "too_heavy" in api_md


def test_the_openapi_schema_and_docs_are_served(db):
    schema = Client().get("/api/openapi.json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert {"/api/deliveryrequests", "/api/deliveries", "/api/deliveries/{delivery_id}/timeline"} <= set(paths)
    request_schema = schema.json()["components"]["schemas"]["DeliveryRequestIn"]
    assert {"pickupLocation", "dropOffLocation", "packageInfo"} <= set(request_schema["properties"])
    assert Client().get("/api/docs").status_code == 200


def test_a_page_number_below_one_is_a_422_naming_page(customer):
    response = customer.get("/deliveries?page=0")
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "page"


def test_a_pickup_time_a_little_in_the_past_means_now_and_further_back_is_refused(customer, settings):
    settings.DELIVERY_PICKUP_TIME_TOLERANCE_SECONDS = 300
    a_minute_ago = (timezone.now() - timedelta(minutes=1)).isoformat()
    ten_minutes_ago = (timezone.now() - timedelta(minutes=10)).isoformat()

    assert customer.request(delivery_request(pickupTime=a_minute_ago)).status_code == 202
    refused = customer.request(delivery_request(pickupTime=ten_minutes_ago))
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "pickupTime" and "300 s" in refused.json()["errors"][0]["message"]
    delivery_id = Delivery.objects.get().id
    patch = customer.client.patch(
        f"/api/deliveryrequests/{delivery_id}", {"pickupTime": ten_minutes_ago}, content_type="application/json"
    )
    assert patch.status_code == 422 and patch.json()["errors"][0]["field"] == "pickupTime"


def test_a_deadline_no_drone_can_meet_is_refused_naming_the_earliest_possible(customer, settings):
    settings.DRONE_SIMULATION_SPEEDUP, settings.DELIVERY_FASTEST_DRONE_KMH = 1, 60  # real flights: 2.4 km, 2.5 min
    pickup = timezone.now() + timedelta(minutes=5)
    too_soon = delivery_request(pickupTime=pickup.isoformat(), deadline=(pickup + timedelta(seconds=1)).isoformat())

    refused = customer.request(too_soon)

    assert refused.status_code == 422, refused.content
    (error,) = refused.json()["errors"]
    assert error["field"] == "deadline" and "at or after" in error["message"] and "2 min" in error["message"]
    assert not Delivery.objects.exists()
    meetable = delivery_request(pickupTime=pickup.isoformat(), deadline=(pickup + timedelta(minutes=3)).isoformat())
    assert customer.request(meetable).status_code == 202
    delivery_id = Delivery.objects.get().id
    patch = customer.client.patch(
        f"/api/deliveryrequests/{delivery_id}",
        {"deadline": (pickup + timedelta(seconds=30)).isoformat()},
        content_type="application/json",
    )
    assert patch.status_code == 422 and patch.json()["errors"][0]["field"] == "deadline"


def test_a_package_on_its_way_cannot_be_sent_again_until_its_delivery_ends(customer, other_customer):
    package = {"packageId": str(uuid4()), "size": "Small", "weight": 1.5}
    assert customer.request(delivery_request(packageInfo=package)).status_code == 202

    again = customer.request(delivery_request(packageInfo=package))

    assert again.status_code == 409
    assert again.json()["errors"][0]["field"] == "packageInfo.packageId"
    assert Delivery.objects.count() == 1
    assert other_customer.request(delivery_request(packageInfo=package)).status_code == 202  # ids are per customer
    Delivery.objects.filter(customer=customer.customer).update(status="failed")
    assert customer.request(delivery_request(packageInfo=package)).status_code == 202  # it may travel again


def test_a_package_whose_delivery_was_cancelled_may_be_sent_again(customer):
    package = {"packageId": str(uuid4()), "size": "Small", "weight": 1.5}
    first = customer.request(delivery_request(packageInfo=package))
    assert customer.cancel(first.json()["deliveryId"]).status_code == 202  # cancelled has ended, as failed has
    customer.client.raise_request_exception = False  # a refusal by the database is answered, as in production

    again = customer.request(delivery_request(packageInfo=package))

    assert again.status_code == 202, again.content
    assert sorted(Delivery.objects.values_list("status", flat=True)) == ["cancelled", "requested"]
