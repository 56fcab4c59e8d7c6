"""The chaos rig's ledger finds each kind of violation it promises to find (and none in a clean run)."""

import json
import time
import uuid
from datetime import datetime, timedelta

import pytest
from django.utils import timezone
from outbox_tests.letters import a_dead_letter

from harness.chaos import WebhookReceiver, WebhookWatch, plan_faults
from harness.ledger import Ledger
from outbox.models import InboxMessage, OutboxMessage
from webhooks.models import Endpoint, Message
from webhooks.sending import signature_headers

pytestmark = pytest.mark.django_db


def an_event(type_: str = "probe.pinged", *, payload: dict | None = None, recipients=("probe_a",)) -> OutboxMessage:
    now = timezone.now()
    return OutboxMessage.objects.create(
        type=type_,
        version=1,
        source="probe",
        occurred_at=now,
        correlation_id=uuid.uuid4(),
        stream="ledger:test",
        sequence=OutboxMessage.objects.count() + 1,
        payload=payload or {},
        available_at=now,
        published_at=now,
        recipients=list(recipients),
    )


def processed(message: OutboxMessage, subscriber: str = "probe_a") -> None:
    InboxMessage.objects.create(
        subscriber=subscriber, message_id=message.message_id, type=message.type, correlation_id=message.correlation_id
    )


def checked(accepted=()) -> Ledger:
    ledger = Ledger(accepted=list(accepted))
    ledger.check()
    return ledger


def test_a_clean_history_has_no_violation():
    processed(an_event())
    assert Ledger(accepted=[]).unsettled() == []
    assert checked().violations == []


def test_a_message_a_recipient_never_processed_is_a_violation():
    message = an_event(recipients=("probe_a", "probe_b"))
    processed(message, "probe_a")

    assert Ledger(accepted=[]).unsettled() == ["1 messages not processed by a recipient"]
    assert checked().violations == [f"probe.pinged {message.message_id} never processed by probe_b"]


def test_a_row_due_and_never_relayed_is_a_violation():
    OutboxMessage.objects.filter(pk=an_event().pk).update(published_at=None)
    assert checked().violations == ["1 outbox rows due and never relayed"]


def test_a_202_without_a_delivery_is_a_violation():
    missing = str(uuid.uuid4())
    assert checked(accepted=[missing]).violations == [f"202 for {missing} but no delivery"]


def test_a_drone_reserved_for_a_second_delivery_before_its_release_is_a_violation():
    drone, first, second, third = (str(uuid.uuid4()) for _ in range(4))
    for type_, delivery in [
        ("drone.scheduled", first),
        ("drone.released", first),
        ("drone.scheduled", second),  # fine: the drone was released first
        ("drone.scheduled", third),  # not fine: still held for the second
    ]:
        processed(an_event(type_, payload={"drone_id": drone, "delivery_id": delivery}, recipients=()))

    assert checked().violations == [f"drone {drone} reserved for {third} while held for {second}"]


def test_a_delivery_given_two_drones_at_once_is_a_violation():
    delivery, one, two = (str(uuid.uuid4()) for _ in range(3))
    for drone in (one, two):
        an_event("drone.scheduled", payload={"drone_id": drone, "delivery_id": delivery}, recipients=())

    assert checked().violations == [f"delivery {delivery} holds drones {sorted([one, two])}"]


def test_a_dead_letter_is_a_violation():
    a_dead_letter(reason="handler_error")
    assert checked().violations == ["dead letter: probe.pinged to probe_b, handler_error"]


def test_the_same_seed_plans_the_same_faults_with_every_kind():
    import random

    plan = plan_faults(random.Random(7), duration=60, per_kind=2, broker_is_rabbitmq=True)
    assert plan == plan_faults(random.Random(7), duration=60, per_kind=2, broker_is_rabbitmq=True)
    assert sorted({f.kind for f in plan}) == sorted(
        ["kill_relay", "kill_worker", "pause_relay", "pause_worker", "close_broker_connections"]
    )
    assert len(plan) == 10 and all(1 <= f.at <= 60 for f in plan)


def test_a_timer_that_falls_due_after_the_run_was_found_quiet_is_not_held_against_it():
    quiet_at = timezone.now()
    OutboxMessage.objects.filter(pk=an_event().pk).update(
        published_at=None, available_at=quiet_at + timedelta(seconds=1)
    )
    OutboxMessage.objects.filter(pk=an_event().pk).update(published_at=None, available_at=quiet_at)

    ledger = Ledger(accepted=[], as_of=quiet_at)
    ledger.check()

    assert ledger.violations == ["1 outbox rows due and never relayed"]  # the one due at quiet_at, not the later one


def test_on_a_cluster_of_its_own_the_plan_also_stops_and_kills_broker_nodes():
    import random

    plan = plan_faults(random.Random(7), duration=60, per_kind=2, broker_is_rabbitmq=True, cluster_nodes=3)

    nodes = [f for f in plan if f.kind in ("stop_broker_node", "kill_broker_node")]
    assert sorted({f.kind for f in nodes}) == ["kill_broker_node", "stop_broker_node"] and len(nodes) == 4
    assert {f.target for f in nodes} <= {"node-1", "node-2", "node-3"}
    assert not [
        f for f in plan_faults(random.Random(7), duration=60, per_kind=2, broker_is_rabbitmq=True) if "node" in f.kind
    ]  # on the configured broker, nodes are not the rig's to stop


def test_with_a_replica_the_plan_fails_the_database_over_once_and_nothing_else():
    import random

    plain = plan_faults(random.Random(7), duration=60, per_kind=2, broker_is_rabbitmq=True)
    plan = plan_faults(random.Random(7), duration=60, per_kind=2, broker_is_rabbitmq=True, database_replica=True)

    failovers = [f for f in plan if f.kind == "failover_database"]
    assert len(failovers) == 1 and failovers[0].target == "" and 1.0 <= failovers[0].at <= 60
    assert [f for f in plan if f.kind != "failover_database"] == plain  # the seed's other faults stay as they were
    assert not [f for f in plain if f.kind == "failover_database"]  # on the configured database, never
    assert not plan_faults(random.Random(7), duration=60, per_kind=0, broker_is_rabbitmq=True, database_replica=True)


# The webhooks' part: status changes, the endpoint's messages, and what the receiver got.


def a_status_change(delivery_id: str, status: str) -> tuple[str, datetime]:
    changed_at = timezone.now()
    payload = {"delivery_id": delivery_id, "status": status, "changed_at": changed_at.isoformat()}
    an_event("delivery.status_changed", payload=payload, recipients=())
    return f"delivery.{status}", changed_at


def a_message(endpoint: Endpoint, delivery_id: str, change: tuple[str, datetime]) -> Message:
    body = json.dumps({"type": change[0], "timestamp": change[1].isoformat(), "data": {"deliveryId": delivery_id}})
    return Message.objects.create(
        endpoint=endpoint, delivery_id=delivery_id, event_type=change[0], body=body, status="delivered", attempts=1
    )


def arrives(watch: WebhookWatch, message: Message, path: str = "/hooks", secret: str | None = None) -> int | None:
    headers = signature_headers(
        secrets=[secret or watch.receiver.secrets[path]],
        webhook_id=message.pk,
        timestamp=timezone.now(),
        body=message.body,
    )
    return watch.receiver.accept(path, headers, message.body)


@pytest.fixture
def watch() -> WebhookWatch:
    live, disabled = (Endpoint.objects.create(customer_id=uuid.uuid4(), url=f"http://127.0.0.1/{p}") for p in "ab")
    receiver = WebhookReceiver()
    receiver.secrets = {"/hooks": live.secret, "/disabled": disabled.secret}
    return WebhookWatch(
        receiver=receiver,
        endpoint_id=str(live.pk),
        path="/hooks",
        event_types=["delivery.in_transit", "delivery.delivered"],
        silent={str(disabled.pk): "/disabled"},
    )


def webhook_ledger(watch: WebhookWatch, delivery_id: str) -> Ledger:
    ledger = Ledger(accepted=[delivery_id], webhooks=watch)
    ledger.check()
    return ledger


def webhook_violations(watch: WebhookWatch, delivery_id: str) -> list[str]:
    return [v for v in webhook_ledger(watch, delivery_id).violations if v != f"202 for {delivery_id} but no delivery"]


def watch_figures(watch: WebhookWatch, delivery_id: str) -> dict:
    return webhook_ledger(watch, delivery_id).figures


def test_every_status_change_asked_for_arrived_once_in_order_signed_is_clean_and_copies_are_dropped(watch):
    delivery_id = str(uuid.uuid4())
    a_status_change(delivery_id, "scheduled")  # not asked for: no message owed
    endpoint = Endpoint.objects.get(pk=watch.endpoint_id)
    first, second = (
        a_message(endpoint, delivery_id, a_status_change(delivery_id, s)) for s in ("in_transit", "delivered")
    )
    watch.receiver.down = (0.0, time.monotonic() + 60)
    assert [watch.receiver.accept("/hooks", {}, "{}") for _ in range(3)] == [503, 503, None]  # down
    watch.receiver.down = (0.0, 0.0)

    assert [arrives(watch, first), arrives(watch, first), arrives(watch, second)] == [204, 204, 204]

    assert Ledger(accepted=[], webhooks=watch).unsettled() == []
    assert webhook_violations(watch, delivery_id) == []
    ledger = Ledger(accepted=[delivery_id], webhooks=watch)
    ledger.check()
    assert ledger.figures["webhooks_received"] == 2 and ledger.figures["webhook_duplicates_dropped_by_receiver"] == 1
    assert ledger.figures["webhook_posts_refused_while_down"] == 2
    assert ledger.figures["webhook_connections_cut_while_down"] == 1


def test_a_webhook_that_never_arrived_is_a_violation_and_a_pending_one_is_waited_for(watch):
    delivery_id = str(uuid.uuid4())
    message = a_message(
        Endpoint.objects.get(pk=watch.endpoint_id), delivery_id, a_status_change(delivery_id, "in_transit")
    )
    Message.objects.filter(pk=message.pk).update(status="pending")

    assert Ledger(accepted=[], webhooks=watch).unsettled() == ["1 webhook messages pending"]
    assert webhook_violations(watch, delivery_id) == [
        f"webhook {message.pk} (delivery.in_transit of {delivery_id}) never arrived"
    ]


def test_a_status_change_with_no_message_or_two_is_a_violation(watch):
    delivery_id = str(uuid.uuid4())
    endpoint = Endpoint.objects.get(pk=watch.endpoint_id)
    a_status_change(delivery_id, "in_transit")
    delivered = a_status_change(delivery_id, "delivered")
    twins = [a_message(endpoint, delivery_id, delivered) for _ in range(2)]
    for message in twins:
        arrives(watch, message)

    assert webhook_violations(watch, delivery_id) == [
        f"delivery {delivery_id}'s delivery.in_transit became no webhook message",
        f"delivery {delivery_id}'s delivery.delivered became 2 messages: {twins[0].pk}, {twins[1].pk}",
    ]


def test_a_webhook_with_another_body_or_a_bad_signature_is_a_violation(watch):
    delivery_id = str(uuid.uuid4())
    endpoint = Endpoint.objects.get(pk=watch.endpoint_id)
    first, second = (
        a_message(endpoint, delivery_id, a_status_change(delivery_id, s)) for s in ("in_transit", "delivered")
    )
    arrives(watch, first)
    arrives(watch, second)
    forged = Endpoint.objects.create(customer_id=uuid.uuid4(), url="http://127.0.0.1/c").secret
    assert arrives(watch, first, secret=forged) == 400
    Message.objects.filter(pk=second.pk).update(body=second.body.replace("deliveryId", "deliveryID"))

    violations = webhook_violations(watch, delivery_id)

    assert violations[0] == f"webhook {second.pk} arrived at /hooks with another body"
    assert violations[1].startswith(f"webhook with a bad signature: {first.pk} to /hooks"), violations
    assert len(violations) == 2, violations


def test_webhooks_arriving_out_of_the_order_of_their_changes_are_a_violation(watch):
    delivery_id = str(uuid.uuid4())
    endpoint = Endpoint.objects.get(pk=watch.endpoint_id)
    first, second = (
        a_message(endpoint, delivery_id, a_status_change(delivery_id, s)) for s in ("in_transit", "delivered")
    )
    arrives(watch, second)
    arrives(watch, first)

    assert webhook_violations(watch, delivery_id) == [
        f"delivery {delivery_id}'s webhooks arrived out of order: delivery.delivered, delivery.in_transit"
    ]


def test_a_webhook_for_a_disabled_endpoint_or_with_an_id_no_message_has_is_a_violation(watch):
    delivery_id = str(uuid.uuid4())
    disabled = Endpoint.objects.get(pk=next(iter(watch.silent)))
    held = a_message(disabled, delivery_id, ("delivery.in_transit", timezone.now()))
    arrives(watch, held, path="/disabled")
    stray = Message(pk="msg_stray", body="{}")
    arrives(watch, stray)

    assert webhook_violations(watch, delivery_id) == [
        f"webhook {held.pk} arrived for an endpoint disabled or deleted (/disabled)",
        "webhook msg_stray arrived at /hooks but no message has that id",
    ]
