"""outbox.testing, the helpers for a team adding a context, on this project's own delivery flow."""

import threading
from uuid import UUID

import pytest
from django.db import connection, transaction
from django.utils import timezone

from deliveries.models import Delivery
from outbox.core.publishing import publish
from outbox.models import DeadLetter, InboxMessage, OutboxMessage
from outbox.testing import (
    DeadLettered,
    failing,
    handled_by,
    published,
    recipients,
    run_choreography,
    wait_until_processed,
)
from tests.factories import requested
from tests.probe.events import ProbeEchoed, ProbePinged


def test_run_choreography_plays_a_delivery_to_its_end_in_process(customer, fleet):
    delivery_id = requested(customer)

    handed = run_choreography(correlation_id=delivery_id)

    assert Delivery.objects.get(id=delivery_id).status == "delivered"
    assert handed == InboxMessage.objects.count() > 10  # each copy once, to each of its subscribers
    assert run_choreography(correlation_id=delivery_id) == 0  # nothing left: a second run hands nothing
    [completed] = published("delivery.completed", correlation_id=delivery_id)
    assert completed.payload["delivery_id"] == str(delivery_id) and completed.correlation_id == delivery_id
    assert published("delivery.completed", correlation_id=UUID(int=1)) == []


def test_held_types_and_timers_wait_until_asked_for(customer, fleet):
    delivery_id = requested(customer)

    run_choreography(correlation_id=delivery_id, hold=("package.ready",))
    assert Delivery.objects.get(id=delivery_id).package_ready is False  # the package's answer held back

    run_choreography(correlation_id=delivery_id)
    assert Delivery.objects.get(id=delivery_id).status == "delivered"


def test_a_timer_fires_only_when_asked_to(customer, fleet):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("delivery.requested",))  # nobody answers in time
    assert Delivery.objects.get(id=delivery_id).status == "requested"

    run_choreography(correlation_id=delivery_id, hold=("delivery.requested",), timers=True)

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("failed", "join_timeout")


def test_a_handler_made_to_fail_fails_the_run_or_leaves_its_dead_letter(customer, fleet):
    first, second = requested(customer), requested(customer)

    with failing("notifications", "delivery.dispatched"), pytest.raises(DeadLettered, match="failed on purpose"):
        run_choreography(correlation_id=first)
    with failing("notifications", "delivery.dispatched", error=ValueError("the SMS gateway is down")):
        run_choreography(correlation_id=second, dead_letters="keep")

    letter = DeadLetter.objects.get(correlation_id=second)
    assert (letter.subscriber, letter.type, letter.error) == (
        "notifications",
        "delivery.dispatched",
        "the SMS gateway is down",
    )
    assert Delivery.objects.get(id=second).status == "delivered"  # the rest of the flow went on
    run_choreography(correlation_id=first)  # the handler is itself again outside the block
    assert Delivery.objects.get(id=first).status == "delivered"


@pytest.mark.integration
def test_wait_until_processed_returns_once_a_real_relay_and_workers_are_done(customer, fleet, system):
    delivery_id = requested(customer)

    wait_until_processed(correlation_id=delivery_id, timeout=60)

    # As far as the events already due take it: its flight's reports are scheduled for later.
    assert Delivery.objects.get(id=delivery_id).status in ("in_transit", "delivered")
    for row in OutboxMessage.objects.filter(
        correlation_id=delivery_id, type__in=("delivery.requested", "drone.scheduled", "package.ready")
    ):
        assert row.published_at is not None and set(recipients(row)) <= handled_by(row), row.type


def test_wait_until_processed_names_what_is_still_out(customer, fleet, transactional_db):
    delivery_id = requested(customer)  # no relay runs

    with pytest.raises(TimeoutError, match=r"after 0.2 s still not processed: delivery.requested #\d+ not relayed"):
        wait_until_processed(correlation_id=delivery_id, timeout=0.2)


@pytest.mark.postgres
def test_wait_until_processed_is_not_fooled_by_a_handler_committing_between_its_reads(transactional_db):
    """CI, 2026-12-03: it returned while a delivery's second events were still to be handled. A
    handler commits its inbox row and the events it published together; read statement by
    statement, the events were read before the commit and the inbox row after it."""
    with transaction.atomic():
        pinged = publish(ProbePinged(n=1), stream="snapshot:1")
    OutboxMessage.objects.filter(id=pinged.id).update(published_at=timezone.now())  # relayed

    def handlers_commit():  # probe_a and probe_b process it, and probe_b publishes what it causes
        with transaction.atomic():
            for subscriber in pinged.recipients:
                InboxMessage.objects.create(
                    subscriber=subscriber,
                    message_id=pinged.message_id,
                    type=pinged.type,
                    correlation_id=pinged.correlation_id,
                    processed_at=timezone.now(),
                )
            publish(ProbeEchoed(n=1), stream="snapshot:1", correlation_id=pinged.correlation_id)
        connection.close()

    def commit_after_the_first_read(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not committed and sql.lstrip().startswith("SELECT"):
            committed.append(threading.Thread(target=handlers_commit))
            committed[0].start()
            committed[0].join()
        return result

    committed: list[threading.Thread] = []
    with (
        connection.execute_wrapper(commit_after_the_first_read),
        pytest.raises(TimeoutError, match=r"probe.echoed #\d+ not relayed"),
    ):
        wait_until_processed(correlation_id=pinged.correlation_id, timeout=1)
    assert committed, "the handlers' commit was never placed between two reads"
