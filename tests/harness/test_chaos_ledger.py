"""The chaos rig's ledger finds each kind of violation it promises to find (and none in a clean run)."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from outbox_tests.letters import a_dead_letter

from harness.chaos import Ledger, plan_faults
from outbox.models import InboxMessage, OutboxMessage

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
