"""What a customer's endpoint is sent, through the real choreography and a real HTTP receiver the
test starts: one signed POST per status change, in order, each `webhook-id` the same on a retry;
an endpoint down for long enough disabled and its messages held, then sent oldest first when it is
enabled; nothing to a disabled endpoint, nor to an address the guard refuses at send time."""

import json
from datetime import timedelta
from uuid import UUID, uuid4

from django.db.models import F
from django.utils import timezone

from outbox.models import DeadLetter, OutboxMessage
from outbox.testing import hand_over, pending, published, run_choreography
from tests.factories import requested
from webhooks import services
from webhooks.models import Attempt, Endpoint, HeardChanges, Message


def registered(customer, url: str, **body) -> dict:
    answer = customer.client.post("/api/webhookendpoints", {"url": url, **body}, content_type="application/json")
    assert answer.status_code == 201, answer.json()
    return answer.json()


def played(delivery_id: UUID) -> None:
    """The delivery's choreography to its end, each webhook retry handed over at once, its time not waited for."""
    run_choreography(correlation_id=delivery_id)
    while retries := pending("webhook.due"):  # a retry is a story of its own
        for due in retries:
            hand_over(due)
        run_choreography(correlation_id=delivery_id)


def statuses_told(delivery_id: UUID) -> list[str]:
    return [e.payload["status"] for e in published("delivery.status_changed", correlation_id=delivery_id)]


def test_each_status_change_is_posted_once_signed_and_in_order(customer, fleet, receiver):
    endpoint = registered(customer, receiver.url)
    delivery_id = requested(customer)

    played(delivery_id)

    told = statuses_told(delivery_id)
    assert told[0] == "requested" and told[-1] == "delivered" and len(told) >= 4
    bodies = receiver.verified(endpoint["secret"])
    assert [b["type"] for b in bodies] == [f"delivery.{s}" for s in told]
    assert {b["data"]["deliveryId"] for b in bodies} == {str(delivery_id)}
    assert [b["data"]["status"] for b in bodies] == told
    assert set(bodies[-1]["data"]) == {
        "deliveryId",
        "status",
        "statusReason",
        "lastKnownLocation",
        "pickupEta",
        "deliveryEta",
    }
    ids = [r["headers"]["webhook-id"] for r in receiver.received]
    assert len(set(ids)) == len(ids) and all(i.startswith("msg_") for i in ids)
    assert receiver.received[0]["headers"]["content-type"] == "application/json"
    assert set(Message.objects.values_list("status", flat=True)) == {Message.Status.DELIVERED}
    assert not DeadLetter.objects.exists()


def test_a_failed_post_is_retried_with_the_same_webhook_id_and_body(customer, fleet, receiver):
    endpoint = registered(customer, receiver.url)
    receiver.answers = [500]
    delivery_id = requested(customer)

    played(delivery_id)

    first, retry, *rest = receiver.received
    assert first["headers"]["webhook-id"] == retry["headers"]["webhook-id"]
    assert first["body"] == retry["body"]
    assert json.loads(first["body"])["type"] == "delivery.requested"
    bodies = receiver.verified(endpoint["secret"])
    told = statuses_told(delivery_id)
    assert told[-1] == "delivered" and [b["data"]["status"] for b in bodies[1:]] == told  # each in order, after it
    message = Message.objects.get(pk=first["headers"]["webhook-id"])
    assert message.status == Message.Status.DELIVERED and message.attempts == 2
    assert list(message.attempts_made.order_by("attempted_at").values_list("status_code", flat=True)) == [500, 200]
    attempts = customer.get(f"/webhookendpoints/{endpoint['id']}/attempts").json()["items"]
    assert attempts[-1]["statusCode"] == 500 and attempts[-1]["webhookId"] == message.pk
    assert Endpoint.objects.get(pk=endpoint["id"]).failing_since is None


def test_a_retry_is_scheduled_later_and_a_stale_copy_of_its_due_sends_nothing(customer, receiver, settings):
    settings.WEBHOOKS_BACKOFF_SECONDS = (5.0, 30.0)  # the default's first steps
    endpoint = Endpoint.objects.get(pk=registered(customer, receiver.url)["id"])
    receiver.answers = [503]
    [message] = services.enqueue_status_change(
        customer_id=customer.customer.pk, delivery_id=UUID(int=1), status="requested", changed_at=timezone.now()
    )
    before = timezone.now()

    services.attempt(message_id=message.pk, after_attempts=0)
    services.attempt(message_id=message.pk, after_attempts=0)  # a second copy of the same due

    message.refresh_from_db()
    assert len(receiver.received) == 1 and message.attempts == 1 and message.status == Message.Status.PENDING
    assert before + timedelta(seconds=2) <= message.next_attempt_at <= before + timedelta(seconds=6)
    retry = [e for e in published("webhook.due") if e.payload == {"webhook_id": message.pk, "after_attempts": 1}]
    assert len(retry) == 1
    endpoint.refresh_from_db()
    assert endpoint.failing_since is not None


def test_retries_past_the_hop_limit_go_on_not_dead_lettered_as_a_loop(customer, fleet, receiver, settings):
    """Three days of retries are some thirty links: each is a story of its own, not a hop further."""
    receiver.answers = [503] * 100
    registered(customer, receiver.url, eventTypes=["delivery.delivered"])
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id)

    for _ in range(settings.OUTBOX_MAX_HOPS + 5):
        [retry] = pending("webhook.due")
        hand_over(retry)  # raises if it was dead-lettered (loop_detected)

    [message] = Message.objects.all()
    assert message.attempts == settings.OUTBOX_MAX_HOPS + 6 and message.status == Message.Status.PENDING
    assert not DeadLetter.objects.exists()


def test_the_backoff_grows_and_never_passes_its_schedule():
    import random

    rng = random.Random(7)
    steps = [services.backoff(n, rng=rng).total_seconds() for n in range(1, 10)]
    assert [2.5 <= steps[0] <= 5, 15 <= steps[1] <= 30, 60 <= steps[2] <= 120] == [True] * 3
    assert all(2 * 3600 <= s <= 4 * 3600 for s in steps[6:])


def test_the_backoff_follows_the_schedule_a_deployment_sets(settings):
    import random

    settings.WEBHOOKS_BACKOFF_SECONDS = (1.0, 2.0, 3.0)
    rng = random.Random(7)
    steps = [services.backoff(n, rng=rng).total_seconds() for n in range(1, 8)]
    assert [0.5 <= steps[0] <= 1, 1 <= steps[1] <= 2, 1.5 <= steps[2] <= 3] == [True] * 3
    assert all(6 <= s <= 12 for s in steps[3:]), steps


def test_an_endpoint_down_past_the_horizon_is_disabled_its_messages_held_then_sent_oldest_first_when_enabled(
    customer, fleet, receiver
):
    endpoint = registered(customer, receiver.url)
    receiver.answers = [500] * 1000
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id)  # the retries wait for their time
    assert len(receiver.received) == 1  # the first message failed; the rest wait for it
    told = statuses_told(delivery_id)

    past_the_horizon = timedelta(days=3, minutes=1)  # time moved on: everything as long ago
    Endpoint.objects.filter(pk=endpoint["id"]).update(failing_since=F("failing_since") - past_the_horizon)
    Message.objects.filter(endpoint_id=endpoint["id"]).update(created_at=F("created_at") - past_the_horizon)
    [retry] = pending("webhook.due")
    hand_over(retry)

    stored = Endpoint.objects.get(pk=endpoint["id"])
    assert stored.disabled_at is not None and "no success" in stored.disabled_reason
    assert set(Message.objects.values_list("status", flat=True)) == {Message.Status.HELD}
    [disabled] = published("webhook.endpoint_disabled")
    assert disabled.payload == {"endpoint_id": endpoint["id"], "customer_id": disabled.payload["customer_id"]}
    assert customer.get(f"/webhookendpoints/{endpoint['id']}").json()["enabled"] is False
    played(delivery_id)  # what is still scheduled finds them held
    assert len(receiver.received) == 2

    receiver.answers = []
    enabled = customer.client.post(f"/api/webhookendpoints/{endpoint['id']}/enable")
    assert enabled.status_code == 200
    played(delivery_id)

    sent_after = receiver.verified(endpoint["secret"])[2:]
    assert [b["data"]["status"] for b in sent_after] == told  # oldest first, each once
    assert set(Message.objects.values_list("status", flat=True)) == {Message.Status.DELIVERED}


def test_a_disabled_endpoint_is_sent_nothing(customer, fleet, receiver):
    endpoint = registered(customer, receiver.url)
    services.disable(endpoint=Endpoint.objects.get(pk=endpoint["id"]), reason="by hand")
    delivery_id = requested(customer)

    played(delivery_id)

    assert receiver.received == []
    assert Message.objects.count() == len(statuses_told(delivery_id))
    assert set(Message.objects.values_list("status", flat=True)) == {Message.Status.HELD}


def test_a_disabled_endpoint_s_alert_address_is_emailed_once_for_each_disabling(customer, receiver, mailoutbox):
    endpoint = registered(customer, receiver.url, alertEmail="ops@example.com")
    silent = registered(customer, receiver.url)  # no alert address: told by the API only
    for each in (endpoint, silent):
        services.disable(endpoint=Endpoint.objects.get(pk=each["id"]), reason="no success for 3 days")
    run_choreography()

    [mail] = mailoutbox
    assert mail.to == ["ops@example.com"] and mail.subject == f"Webhook endpoint disabled: {receiver.url}"
    assert "no success for 3 days" in mail.body and f"/api/webhookendpoints/{endpoint['id']}/enable" in mail.body
    assert services.alert_disabled(endpoint_id=endpoint["id"]) is False  # a copy of the event: told already
    assert len(mailoutbox) == 1

    services.enable(endpoint=Endpoint.objects.get(pk=endpoint["id"]))
    services.disable(endpoint=Endpoint.objects.get(pk=endpoint["id"]), reason="no success for 3 days")
    run_choreography()
    assert len(mailoutbox) == 2


def test_only_the_event_types_an_endpoint_asked_for_are_sent(customer, fleet, receiver):
    endpoint = registered(customer, receiver.url, eventTypes=["delivery.delivered"])
    delivery_id = requested(customer)

    played(delivery_id)

    assert [b["type"] for b in receiver.verified(endpoint["secret"])] == ["delivery.delivered"]


def test_an_address_the_guard_refuses_at_send_time_is_an_attempt_with_its_error_and_nothing_sent(
    customer, fleet, receiver, settings
):
    endpoint = registered(customer, receiver.url)
    settings.WEBHOOKS_ALLOW_PRIVATE_NETWORKS = []  # allowed when registered, no longer
    delivery_id = requested(customer)

    run_choreography(correlation_id=delivery_id)

    assert receiver.received == []
    [attempt] = Attempt.objects.all()
    assert attempt.status_code is None and "127.0.0.1" in attempt.error
    assert not DeadLetter.objects.exists()
    assert customer.get(f"/webhookendpoints/{endpoint['id']}/attempts").json()["items"][0]["error"] == attempt.error


def test_a_ping_is_sent_signed(customer, receiver):
    endpoint = registered(customer, receiver.url)
    queued = customer.client.post(f"/api/webhookendpoints/{endpoint['id']}/ping")

    run_choreography()

    [ping] = receiver.verified(endpoint["secret"])
    assert ping["type"] == "webhook.ping" and ping["data"] == {"endpointId": endpoint["id"]}
    assert receiver.received[0]["headers"]["webhook-id"] == queued.json()["webhookId"]


def test_after_a_rotation_both_secrets_verify_the_same_message(customer, receiver):
    endpoint = registered(customer, receiver.url)
    rotated = customer.client.post(f"/api/webhookendpoints/{endpoint['id']}/rotate-secret").json()
    customer.client.post(f"/api/webhookendpoints/{endpoint['id']}/ping")

    run_choreography()

    assert receiver.verified(rotated["secret"]) == receiver.verified(endpoint["secret"])


def test_the_plain_hmac_verification_in_docs_api_accepts_a_message_and_refuses_a_changed_one(customer, receiver):
    from django.conf import settings

    docs = (settings.BASE_DIR / "docs" / "api.md").read_text()
    code = docs.split("Or with the standard library alone:")[1].split("```python\n")[1].split("```")[0]
    assert len(code.strip().splitlines()) <= 11
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - the docs' own example, run as a receiver would
    endpoint = registered(customer, receiver.url)
    customer.client.post(f"/api/webhookendpoints/{endpoint['id']}/ping")
    run_choreography()

    [ping] = receiver.received
    assert namespace["verify"](endpoint["secret"], ping["body"].encode(), ping["headers"])
    assert not namespace["verify"](endpoint["secret"], ping["body"].encode() + b" ", ping["headers"])


def test_a_status_change_handled_after_a_later_one_is_still_sent(customer, fleet, receiver):
    registered(customer, receiver.url)
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("delivery.status_changed",))
    changes = pending("delivery.status_changed", correlation_id=delivery_id)
    assert len(changes) >= 4
    for change in reversed(changes):  # two workers take a delivery's events in either order
        hand_over(change, to="webhooks")

    made = sorted(Message.objects.values_list("event_type", flat=True))
    assert made == sorted(f"delivery.{change.payload['status']}" for change in changes)


def test_a_change_heard_before_an_earlier_one_waits_for_it_then_all_arrive_in_order(customer, fleet, receiver):
    endpoint = registered(customer, receiver.url)
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("delivery.status_changed",))
    first, *later = pending("delivery.status_changed", correlation_id=delivery_id)
    assert len(later) >= 3
    for change in reversed(later):  # the worker that took the first change stopped before handling it
        hand_over(change, to="webhooks")
    run_choreography(correlation_id=delivery_id, hold=("delivery.status_changed",))

    assert receiver.received == []  # each one made, none sent: the first change is not heard yet
    assert Message.objects.filter(status=Message.Status.PENDING, attempts=0).count() == len(later)

    hand_over(first, to="webhooks")
    played(delivery_id)

    told = [change.payload["status"] for change in [first, *later]]
    assert [b["data"]["status"] for b in receiver.verified(endpoint["secret"])] == told
    assert set(Message.objects.values_list("status", flat=True)) == {Message.Status.DELIVERED}


def test_a_change_never_heard_holds_the_ones_after_it_only_for_the_order_wait(customer, fleet, receiver, settings):
    settings.WEBHOOKS_ORDER_WAIT_SECONDS = 600
    endpoint = registered(customer, receiver.url)
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("delivery.status_changed",))
    first, *later = pending("delivery.status_changed", correlation_id=delivery_id)
    for change in later:  # the first is never heard: its letter was discarded
        hand_over(change, to="webhooks")
    dues = pending("webhook.due", correlation_id=delivery_id)
    assert len(dues) == len(later)  # each message's due at the end of its wait, none now
    for due in dues:
        waiting = Message.objects.get(pk=due.payload["webhook_id"])
        due_at = OutboxMessage.objects.get(message_id=due.message_id).available_at
        assert due_at == waiting.created_at + timedelta(seconds=600)
        hand_over(due)  # early, as a copy could come: it waits still
    assert receiver.received == []

    Message.objects.update(created_at=F("created_at") - timedelta(seconds=601))  # the wait is over
    for _ in range(3 * len(later)):  # bounded: a message that still waited would publish its due again
        for due in pending("webhook.due"):
            hand_over(due)

    told = [change.payload["status"] for change in later]
    assert [b["data"]["status"] for b in receiver.verified(endpoint["secret"])] == told


def test_a_change_an_endpoint_does_not_want_still_holds_back_the_ones_after_it(customer, fleet, receiver):
    wanted = ["delivery.scheduled", "delivery.in_transit", "delivery.delivered"]
    endpoint = registered(customer, receiver.url, eventTypes=wanted)
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("delivery.status_changed",))
    first, *later = pending("delivery.status_changed", correlation_id=delivery_id)
    assert first.payload["status"] == "requested"
    for change in later:
        hand_over(change, to="webhooks")
    run_choreography(correlation_id=delivery_id, hold=("delivery.status_changed",))
    assert receiver.received == []

    hand_over(first, to="webhooks")  # makes no message, and lets the others go
    played(delivery_id)

    bodies = receiver.verified(endpoint["secret"])
    assert [b["type"] for b in bodies] == wanted


def test_a_change_numbered_before_the_deliveries_numbered_them_waits_for_nothing(customer, receiver):
    registered(customer, receiver.url)
    delivery_id = uuid4()
    [message] = services.enqueue_status_change(
        customer_id=customer.customer.id, delivery_id=delivery_id, status="in_transit", changed_at=timezone.now()
    )
    run_choreography(correlation_id=delivery_id)

    assert [json.loads(r["body"])["data"]["status"] for r in receiver.received] == ["in_transit"]
    message.refresh_from_db()
    assert message.status == Message.Status.DELIVERED


def test_heard_changes_know_through_which_number_all_are_heard():
    heard = HeardChanges(delivery_id=uuid4())
    steps = [(2, 0, [2]), (4, 0, [2, 4]), (2, 0, [2, 4]), (1, 2, [4]), (3, 4, None), (3, 4, None)]
    for number, through, beyond in steps:
        heard.hear(number)
        assert (heard.heard_through, heard.heard_beyond) == (through, beyond), number
