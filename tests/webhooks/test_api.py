"""A customer's webhook endpoints through the REST API: created with a secret shown once, listed,
read, deleted, its secret rotated, pinged, enabled again, its attempts listed; another customer's
is not found, and what a client sends is answered with its field named, never a 5xx."""

from datetime import timedelta
from uuid import uuid4

import pytest
from django.utils import timezone

from outbox.testing import published
from webhooks import services
from webhooks.models import Attempt, Endpoint, Message

URL = "http://127.0.0.1:9/hooks"


@pytest.fixture(autouse=True)
def local_receivers(settings):
    settings.WEBHOOKS_ALLOW_HTTP = True
    settings.WEBHOOKS_ALLOW_PRIVATE_NETWORKS = ["127.0.0.0/8"]


def post(customer, path, body=None):
    if body is None:
        return customer.client.post(f"/api{path}")
    return customer.client.post(f"/api{path}", body, content_type="application/json")


def created(customer, **body) -> dict:
    answer = post(customer, "/webhookendpoints", {"url": URL, **body})
    assert answer.status_code == 201, answer.json()
    return answer.json()


def errors_of(answer) -> dict[str, str]:
    assert set(answer.json()) == {"detail", "errors"}
    return {e["field"]: e["message"] for e in answer.json()["errors"]}


def test_an_endpoint_is_created_with_its_secret_shown_once(customer):
    endpoint = created(
        customer,
        description="orders system",
        eventTypes=["delivery.delivered", "delivery.failed"],
        alertEmail="ops@example.com",
    )

    assert endpoint["secret"].startswith("whsec_")
    assert endpoint["alertEmail"] == "ops@example.com" and created(customer)["alertEmail"] is None
    assert endpoint["url"] == URL and endpoint["description"] == "orders system"
    assert endpoint["eventTypes"] == ["delivery.delivered", "delivery.failed"]
    assert endpoint["enabled"] is True and endpoint["createdAt"]
    listed = customer.get("/webhookendpoints").json()
    assert listed["count"] == 2 and endpoint["id"] in [e["id"] for e in listed["items"]]
    read = customer.get(f"/webhookendpoints/{endpoint['id']}").json()
    assert "secret" not in read and "secret" not in listed["items"][0]
    assert read["url"] == URL


def test_another_customers_endpoint_is_not_found(customer, other_customer):
    endpoint = created(customer)
    for answer in (
        other_customer.get(f"/webhookendpoints/{endpoint['id']}"),
        other_customer.client.delete(f"/api/webhookendpoints/{endpoint['id']}"),
        post(other_customer, f"/webhookendpoints/{endpoint['id']}/rotate-secret"),
        post(other_customer, f"/webhookendpoints/{endpoint['id']}/ping"),
        post(other_customer, f"/webhookendpoints/{endpoint['id']}/enable"),
        other_customer.get(f"/webhookendpoints/{endpoint['id']}/attempts"),
    ):
        assert answer.status_code == 404, answer.content
        assert set(answer.json()) == {"detail", "errors"}
    assert other_customer.get("/webhookendpoints").json() == {"items": [], "count": 0}
    assert Endpoint.objects.filter(pk=endpoint["id"]).exists()


def test_a_deleted_endpoint_is_gone(customer):
    endpoint = created(customer)
    assert customer.client.delete(f"/api/webhookendpoints/{endpoint['id']}").status_code == 204
    assert customer.get(f"/webhookendpoints/{endpoint['id']}").status_code == 404


@pytest.mark.parametrize(
    "url, reason",
    [
        ("http://10.0.0.7/hooks", "private"),
        ("http://169.254.169.254/latest/meta-data", None),
        ("ftp://127.0.0.1/hooks", "scheme"),
        ("http:///hooks", None),
        ("not a url", None),
        ("http://[::1/hooks", None),
    ],
)
def test_a_url_the_guard_refuses_is_a_422_naming_url(customer, url, reason):
    answer = post(customer, "/webhookendpoints", {"url": url})

    assert answer.status_code == 422, answer.content
    errors = errors_of(answer)
    assert list(errors) == ["url"]
    if reason:
        assert errors["url"] == reason
    assert not Endpoint.objects.exists()


def test_http_is_refused_where_it_is_not_allowed(customer, settings):
    settings.WEBHOOKS_ALLOW_HTTP = False
    settings.DEBUG = False
    answer = post(customer, "/webhookendpoints", {"url": URL})
    assert answer.status_code == 422 and errors_of(answer) == {"url": "scheme"}


def test_an_unknown_event_type_is_a_422_naming_event_types(customer):
    answer = post(customer, "/webhookendpoints", {"url": URL, "eventTypes": ["delivery.delivered", "delivery.lost"]})
    assert answer.status_code == 422 and list(errors_of(answer)) == ["eventTypes"]
    assert "delivery.lost" in answer.json()["detail"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "url"),
        ({"url": 7}, "url"),
        ({"url": ""}, "url"),
        ({"url": URL, "description": "x" * 201}, "description"),
        ({"url": URL, "eventTypes": "delivery.delivered"}, "eventTypes"),
        ({"url": URL, "eventTypes": [None]}, "eventTypes.0"),
        ({"url": URL, "event_types": []}, "event_types"),
        ({"url": URL, "alertEmail": "ops at example.com"}, "alertEmail"),
        ({"url": URL, "alertEmail": 7}, "alertEmail"),
    ],
)
def test_invalid_input_names_its_field(customer, body, field):
    answer = post(customer, "/webhookendpoints", body)
    assert answer.status_code == 422, answer.content
    assert field in errors_of(answer)


def test_a_path_that_is_no_uuid_and_a_page_out_of_range_are_422s(customer):
    assert list(errors_of(customer.get("/webhookendpoints/nope"))) == ["endpointId"]
    endpoint = created(customer)
    assert customer.get(f"/webhookendpoints/{endpoint['id']}/attempts?page=0").status_code == 422
    assert customer.get(f"/webhookendpoints/{uuid4()}").status_code == 404


def test_without_a_token_nothing_is_answered(customer):
    customer.client.defaults.pop("HTTP_AUTHORIZATION", None)
    from django.test import Client

    assert Client().get("/api/webhookendpoints").status_code == 401


def test_a_rotated_secret_signs_beside_the_new_one_for_the_grace_period(customer, settings):
    settings.WEBHOOKS_SECRET_GRACE_SECONDS = 3600
    endpoint = created(customer)

    answer = post(customer, f"/webhookendpoints/{endpoint['id']}/rotate-secret")

    assert answer.status_code == 200
    rotated = answer.json()
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != endpoint["secret"]
    stored = Endpoint.objects.get(pk=endpoint["id"])
    assert services.signing_secrets(stored, now=timezone.now()) == [rotated["secret"], endpoint["secret"]]
    later = stored.previous_secret_expires_at + timedelta(seconds=1)
    assert services.signing_secrets(stored, now=later) == [rotated["secret"]]


def test_a_ping_is_queued_as_a_message(customer):
    endpoint = created(customer)

    answer = post(customer, f"/webhookendpoints/{endpoint['id']}/ping")

    assert answer.status_code == 202
    message = Message.objects.get(pk=answer.json()["webhookId"])
    assert message.event_type == "webhook.ping" and message.status == Message.Status.PENDING
    [due] = [e for e in published("webhook.due") if e.payload["webhook_id"] == message.pk]
    assert due.payload["after_attempts"] == 0


def test_enabling_clears_the_disabled_state(customer):
    endpoint = created(customer)
    stored = Endpoint.objects.get(pk=endpoint["id"])
    services.disable(endpoint=stored, reason="no success for 3 days")
    assert customer.get(f"/webhookendpoints/{endpoint['id']}").json()["enabled"] is False

    answer = post(customer, f"/webhookendpoints/{endpoint['id']}/enable")

    assert answer.status_code == 200
    assert answer.json()["enabled"] is True and answer.json()["disabledReason"] is None


def test_attempts_are_listed_newest_first_a_page_at_a_time(customer):
    endpoint = created(customer)
    stored = Endpoint.objects.get(pk=endpoint["id"])
    delivery_id = uuid4()
    message = Message.objects.create(
        endpoint=stored, delivery_id=delivery_id, event_type="delivery.requested", body="{}"
    )
    start = timezone.now()
    for n in range(25):
        Attempt.objects.create(
            message=message,
            attempted_at=start + timedelta(seconds=n),
            status_code=500 if n % 2 else None,
            error="" if n % 2 else "connection refused",
            duration_ms=n,
        )

    first = customer.get(f"/webhookendpoints/{endpoint['id']}/attempts").json()
    second = customer.get(f"/webhookendpoints/{endpoint['id']}/attempts?page=2").json()

    assert first["count"] == 25 and len(first["items"]) == 20 and len(second["items"]) == 5
    durations = [a["durationMs"] for a in first["items"] + second["items"]]
    assert durations == list(range(24, -1, -1))
    newest = first["items"][0]
    assert newest == {
        "webhookId": message.pk,
        "eventType": "delivery.requested",
        "deliveryId": str(delivery_id),
        "statusCode": None,
        "error": "connection refused",
        "durationMs": 24,
        "attemptedAt": newest["attemptedAt"],
    }
    assert first["items"][1]["statusCode"] == 500 and first["items"][1]["error"] is None


def patch(customer, path, body):
    return customer.client.patch(f"/api{path}", body, content_type="application/json")


def test_an_endpoint_is_changed_field_by_field_and_what_is_left_out_stays(customer):
    endpoint = created(customer, description="orders", eventTypes=["delivery.delivered"])

    answer = patch(customer, f"/webhookendpoints/{endpoint['id']}", {"alertEmail": "ops@example.com"})

    assert answer.status_code == 200, answer.content
    changed = customer.get(f"/webhookendpoints/{endpoint['id']}").json()
    assert changed["alertEmail"] == "ops@example.com" == answer.json()["alertEmail"]
    assert (changed["description"], changed["eventTypes"], changed["url"]) == ("orders", ["delivery.delivered"], URL)
    answer = patch(
        customer,
        f"/webhookendpoints/{endpoint['id']}",
        {"url": "http://127.0.0.1:9/other", "eventTypes": [], "alertEmail": "", "description": ""},
    )
    assert answer.status_code == 200, answer.content
    assert {k: answer.json()[k] for k in ("url", "eventTypes", "alertEmail", "description")} == {
        "url": "http://127.0.0.1:9/other",
        "eventTypes": [],
        "alertEmail": None,
        "description": "",
    }


@pytest.mark.parametrize(
    "body, field",
    [
        ({"url": "http://10.0.0.1/hooks"}, "url"),
        ({"eventTypes": ["delivery.lost"]}, "eventTypes"),
        ({"alertEmail": "ops at example.com"}, "alertEmail"),
        ({"description": None}, "description"),
        ({"secret": "whsec_mine"}, "secret"),
    ],
)
def test_a_change_that_is_not_allowed_is_a_422_naming_its_field_and_changes_nothing(customer, body, field):
    endpoint = created(customer)  # 127.0.0.0/8 allowed, 10.0.0.0/8 not

    answer = patch(customer, f"/webhookendpoints/{endpoint['id']}", body)

    assert answer.status_code == 422, answer.content
    assert field in errors_of(answer)
    assert customer.get(f"/webhookendpoints/{endpoint['id']}").json() == {
        k: v for k, v in endpoint.items() if k != "secret"
    }


def test_another_customers_endpoint_is_not_changed(customer, other_customer):
    endpoint = created(customer)

    answer = patch(other_customer, f"/webhookendpoints/{endpoint['id']}", {"description": "mine"})

    assert answer.status_code == 404
    assert customer.get(f"/webhookendpoints/{endpoint['id']}").json()["description"] == ""
