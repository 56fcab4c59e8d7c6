"""Notify-me requests: validated, kept in the notifications context, sent once per
request, kind and channel through Django's e-mail framework and a pluggable SMS sender."""

import json
from uuid import UUID

import pytest
from django.core import mail

from notifications.models import Notification, NotifyMeRequest, SentMessage
from outbox.console.dead_letter_actions import replay_dead_letter
from outbox.models import DeadLetter
from outbox.testing import deliver, hand_over, published, run_choreography
from tests.factories import delivery_request

EMAIL, PHONE = "alice@example.com", "+14255550123"
SENT_SMS: list[tuple[str, str]] = []


def record_sms(*, to: str, text: str) -> None:
    SENT_SMS.append((to, text))


@pytest.fixture(autouse=True)
def sms(settings):
    settings.NOTIFICATIONS_SMS_SENDER = "tests.notifications.test_notify_me.record_sms"
    SENT_SMS.clear()
    return SENT_SMS


def ask(customer, delivery_id, body: dict):
    return customer.client.post(
        f"/api/deliveries/{delivery_id}/notifymerequests", json.dumps(body), content_type="application/json"
    )


def requested(customer) -> UUID:
    return UUID(customer.request(delivery_request()).json()["deliveryId"])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body"),
        ({"emailAddress": "not an address"}, "emailAddress"),
        ({"sms": "12345"}, "sms"),
        ({"emailAddress": EMAIL, "fax": "1"}, "fax"),
        ({"emailAddress": None}, "emailAddress"),
    ],
)
def test_a_request_needs_a_valid_address_or_number(customer, body, field):
    delivery_id = requested(customer)

    response = ask(customer, delivery_id, body)

    assert response.status_code == 422, response.content
    assert field in [error["field"] for error in response.json()["errors"]]
    assert not NotifyMeRequest.objects.exists()


def test_only_the_owner_may_ask(customer, other_customer):
    delivery_id = requested(customer)

    assert ask(other_customer, delivery_id, {"emailAddress": EMAIL}).status_code == 404
    assert not NotifyMeRequest.objects.exists()


def test_a_delivery_that_has_ended_takes_no_request_naming_its_status(customer, fleet, db):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id)

    response = ask(customer, delivery_id, {"emailAddress": EMAIL})

    assert response.status_code == 409, response.content
    assert response.json()["errors"] == [{"field": "status", "message": "already_delivered"}]
    assert not NotifyMeRequest.objects.exists()


def test_each_status_change_is_sent_once_per_kind_even_when_an_event_comes_twice(customer, fleet, db, sms):
    delivery_id = requested(customer)
    response = ask(customer, delivery_id, {"emailAddress": EMAIL, "sms": PHONE})
    assert response.status_code == 201, response.content
    assert response.json()["emailAddress"] == EMAIL and response.json()["deliveryId"] == str(delivery_id)

    run_choreography(correlation_id=delivery_id)
    [completed] = published("delivery.completed", correlation_id=delivery_id)
    assert deliver("notifications", completed).outcome == "duplicate"  # delivered twice

    assert [(m.to, m.subject) for m in mail.outbox] == [
        ([EMAIL], f"Delivery {delivery_id}: dispatched"),
        ([EMAIL], f"Delivery {delivery_id}: completed"),
    ]
    assert mail.outbox[1].body == "Your package has been delivered."
    assert sms == [(PHONE, "Your package is on its way."), (PHONE, "Your package has been delivered.")]
    assert SentMessage.objects.count() == 4


def test_no_address_or_number_ever_travels_in_an_event(customer, fleet, db):
    delivery_id = requested(customer)
    ask(customer, delivery_id, {"emailAddress": EMAIL, "sms": PHONE})

    run_choreography(correlation_id=delivery_id)

    envelopes = [envelope.model_dump_json() for envelope in published()]
    assert len(envelopes) > 5
    assert not [e for e in envelopes if EMAIL in e or PHONE in e]


class FailingBackend:
    def __init__(self, *args, **kwargs):
        pass

    def send_messages(self, messages):
        raise ConnectionRefusedError("the SMTP server is down")


def test_a_failed_send_fails_that_message_alone_and_a_replay_sends_it(customer, fleet, db, settings):
    delivery_id = requested(customer)
    ask(customer, delivery_id, {"emailAddress": EMAIL, "sms": PHONE})
    settings.EMAIL_BACKEND = "tests.notifications.test_notify_me.FailingBackend"
    for type_ in ("delivery.requested", "drone.scheduled", "package.ready"):
        hand_over(type_, correlation_id=delivery_id)
    hand_over("delivery.dispatched", correlation_id=delivery_id, to="notifications")

    hand_over("notification.due", correlation_id=delivery_id, dead_letters="keep")

    letter = DeadLetter.objects.get(subscriber="notifications")
    assert letter.reason == "handler_error" and "SMTP server is down" in letter.error
    email = SentMessage.objects.get(channel="email")
    assert email.sent_at is None and SentMessage.objects.get(channel="sms").sent_at is not None
    assert Notification.objects.filter(delivery_id=delivery_id, kind="dispatched").exists()  # committed before
    assert len(SENT_SMS) == 1  # the SMS went out once, the failed e-mail did not take it down with it

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    replay_dead_letter(letter_id=letter.pk, by="operator")
    [replayed] = hand_over("notification.due", correlation_id=delivery_id)
    assert replayed.outcome == "processed"

    email.refresh_from_db()
    assert email.sent_at is not None and [m.to for m in mail.outbox] == [[EMAIL]]
    assert len(SENT_SMS) == 1


def test_a_delivery_takes_a_bounded_number_of_requests(customer, settings):
    settings.NOTIFY_ME_MAX_REQUESTS_PER_DELIVERY = 2
    delivery_id = requested(customer)

    answers = [ask(customer, delivery_id, {"emailAddress": EMAIL}).status_code for _ in range(3)]

    assert answers == [201, 201, 409]
    assert NotifyMeRequest.objects.count() == 2


def waiting_on_an_advisory_lock() -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return cursor.fetchone()[0] > 0


@pytest.mark.postgres
def test_concurrent_requests_never_exceed_a_deliverys_cap(customer, transactional_db, settings, monkeypatch):
    import threading

    from django.db import connection

    from notifications import services
    from tests.waiting import wait_until

    settings.NOTIFY_ME_MAX_REQUESTS_PER_DELIVERY = 1
    delivery_id = requested(customer)
    counted, go, outcomes = threading.Event(), threading.Event(), []
    create = NotifyMeRequest.objects.create

    def create_after_a_pause(**fields):  # the first request has counted 0 and is about to insert
        if threading.current_thread().name == "first":
            counted.set()
            go.wait(20)
        return create(**fields)

    monkeypatch.setattr(NotifyMeRequest.objects, "create", create_after_a_pause)

    def ask_for(name):
        try:
            services.request_notifications(delivery_id=delivery_id, sms=f"+1425555012{len(name)}")
            outcomes.append("kept")
        except services.TooManyRequests:
            outcomes.append("refused")
        finally:
            connection.close()

    first = threading.Thread(target=ask_for, args=("first",), name="first")
    second = threading.Thread(target=ask_for, args=("second",))
    first.start()
    try:
        assert counted.wait(20)
        second.start()
        # The second either counts at once (no lock: it sees room too) or waits for the first.
        wait_until(lambda: outcomes or waiting_on_an_advisory_lock(), what="the second request to count or wait")
    finally:
        go.set()
        first.join(30)
        second.join(30)

    assert sorted(outcomes) == ["kept", "refused"]
    assert NotifyMeRequest.objects.filter(delivery_id=delivery_id).count() == 1
