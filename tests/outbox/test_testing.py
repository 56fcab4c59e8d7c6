"""outbox.testing, the helpers for a team adding a context, on this project's own delivery flow."""

import threading
from uuid import UUID, uuid4

import pytest
from django.db import connection, transaction
from django.utils import timezone
from outbox_tests.probe.events import ProbeEchoed, ProbePinged

from deliveries.models import Delivery
from outbox.core.publishing import publish
from outbox.models import DeadLetter, InboxMessage, OutboxMessage
from outbox.testing import (
    DeadLettered,
    deliver,
    failing,
    hand_over,
    handled_by,
    owed,
    pending,
    published,
    recipients,
    run_choreography,
    wait_until_processed,
)
from packages.handlers import DeliveryRequested, PackageInfo
from packages.models import Package
from tests.factories import requested


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


def test_a_type_handed_to_one_subscriber_leaves_it_pending_for_the_others(customer, fleet):
    delivery_id = requested(customer)

    [handed] = hand_over("delivery.requested", correlation_id=delivery_id, to="packages")

    assert (handed.outcome, handed.envelope.type) == ("processed", "delivery.requested")
    assert [e.type for e in handed.published] == ["package.ready"]
    assert [s for s, e in owed("delivery.requested", correlation_id=delivery_id)] == ["drones"]
    [requested_event] = pending("delivery.requested", correlation_id=delivery_id)
    assert pending("delivery.requested", correlation_id=delivery_id, to="packages") == []
    assert [h.outcome for h in hand_over(requested_event)] == ["processed"]  # to the drones, the one still owed
    assert hand_over(requested_event) == []  # nothing owed any more
    with pytest.raises(TypeError, match="an event type or an Envelope, not OutboxMessage"):
        hand_over(OutboxMessage.objects.filter(correlation_id=delivery_id).first())  # a row is not what it takes


def test_hand_over_fails_on_a_letter_unless_told_to_keep_it(customer, fleet):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("delivery.dispatched",))

    with failing("notifications", "delivery.dispatched"), pytest.raises(DeadLettered, match="failed on purpose"):
        hand_over("delivery.dispatched", correlation_id=delivery_id, to="notifications")
    assert pending("delivery.dispatched", correlation_id=delivery_id, to="notifications") == []  # set aside

    with failing("drones", "delivery.dispatched"):
        [kept] = hand_over("delivery.dispatched", correlation_id=delivery_id, to="drones", dead_letters="keep")
    assert (kept.outcome, kept.dead_letter.subscriber) == ("dead_lettered", "drones")


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


def requested_v1(delivery_id: UUID, *, expedited: bool = False) -> dict:
    """delivery.requested as its version 1 publisher sends it, written as a subscriber's test would:
    a dict, with none of the deliveries context's contracts or code."""
    return {
        "delivery_id": str(delivery_id),
        "pickup": {"latitude": 47.6205, "longitude": -122.3493},
        "dropoff": {"latitude": 47.6097, "longitude": -122.3331},
        "pickup_time": timezone.now().isoformat(),
        "expedited": expedited,
        "package": {"package_id": str(uuid4()), "size": "Small", "weight_kg": 1.5},
    }


def test_deliver_hands_one_message_to_one_subscriber_and_shows_what_it_published_in_turn(db):
    delivery_id = uuid4()

    handed = deliver("packages", "delivery.requested", requested_v1(delivery_id))

    assert (handed.outcome, handed.dead_letter) == ("processed", None)
    assert Package.objects.get(delivery_id=delivery_id).status == Package.Status.READY
    [ready] = handed.published
    assert (ready.type, ready.causation_id, ready.correlation_id, ready.hops) == (
        "package.ready",
        handed.envelope.message_id,
        handed.envelope.correlation_id,
        1,
    )
    assert published("package.ready") == [ready]
    assert list(InboxMessage.objects.values_list("subscriber", flat=True)) == ["packages"]  # to that one only


def test_the_same_message_handed_again_is_a_duplicate_and_not_handled_again(db):
    payload = requested_v1(uuid4())

    first = deliver("packages", "delivery.requested", payload)
    again = deliver("packages", first.envelope)
    by_its_id = deliver("packages", "delivery.requested", payload, message_id=first.envelope.message_id)

    assert (first.outcome, again.outcome, by_its_id.outcome) == ("processed", "duplicate", "duplicate")
    assert again.published == by_its_id.published == ()
    assert InboxMessage.objects.get(subscriber="packages").duplicates == 2
    assert OutboxMessage.objects.filter(type="package.ready").count() == 1


def test_a_payload_may_be_built_with_the_subscribers_own_reader(db):
    delivery_id, package_id = uuid4(), uuid4()
    request = DeliveryRequested(
        delivery_id=delivery_id, package=PackageInfo(package_id=package_id, size="Small", weight_kg=1.5)
    )

    handed = deliver("packages", "delivery.requested", request, version=2)

    assert handed.outcome == "processed"
    assert handed.envelope.payload["package"]["package_id"] == str(package_id)  # as JSON carries it
    assert Package.objects.get(delivery_id=delivery_id).package_id == package_id


def test_deliver_upcasts_and_dead_letters_a_version_it_cannot_read(fleet):
    # The drone scheduler reads version 2 only: version 1 reaches it through the publisher's upcaster.
    upcast = deliver("drones", "delivery.requested", requested_v1(uuid4(), expedited=True), version=1)
    unknown = deliver("drones", "delivery.requested", requested_v1(uuid4()), version=9)

    assert upcast.outcome == "processed"
    assert (unknown.outcome, unknown.dead_letter.reason) == ("dead_lettered", "unsupported_version")


def test_an_ordered_subscriber_finds_an_older_message_of_its_stream_stale(db):
    position = {"delivery_id": str(uuid4()), "latitude": 47.61, "longitude": -122.34}

    later = deliver("deliveries", "drone.position_reported", position, stream="assignment:1", sequence=2)
    earlier = deliver("deliveries", "drone.position_reported", position, stream="assignment:1", sequence=1)
    of_its_own_stream = deliver("deliveries", "drone.position_reported", position)

    assert (later.outcome, earlier.outcome, of_its_own_stream.outcome) == ("processed", "stale", "processed")


def test_an_invalid_payload_or_a_failing_handler_is_a_dead_letter_that_says_why(db):
    invalid = deliver("packages", "delivery.requested", {"delivery_id": str(uuid4())})
    with failing("packages", "delivery.requested", error=ValueError("the scale is broken")):
        failed = deliver("packages", "delivery.requested", requested_v1(uuid4()))

    assert (invalid.outcome, invalid.dead_letter.reason) == ("dead_lettered", "invalid_payload")
    assert "package" in invalid.dead_letter.error  # the field the subscriber's reader missed
    assert (failed.outcome, failed.dead_letter.reason, failed.dead_letter.error) == (
        "dead_lettered",
        "handler_error",
        "the scale is broken",
    )
    assert "dead_lettered, handler_error: the scale is broken" in repr(failed)  # what a failed assert shows
    assert DeadLetter.objects.count() == 2 and not Package.objects.exists()


def test_what_a_subscriber_publishes_to_compensate_for_an_unreadable_message_is_shown(customer):
    delivery_id = requested(customer)

    handed = deliver("deliveries", "drone.scheduled", {"delivery_id": str(delivery_id), "eta": "soon"})

    assert (handed.outcome, handed.dead_letter.reason) == ("dead_lettered", "invalid_payload")
    failed, changed = handed.published
    assert (failed.type, failed.payload["reason"]) == ("delivery.failed", "unprocessable")
    assert (changed.type, changed.payload["status"]) == ("delivery.status_changed", "failed")


def test_deliver_refuses_a_type_the_subscriber_does_not_handle_and_fields_beside_an_envelope(db):
    with pytest.raises(LookupError, match=r"packages has no handler for delivery.requsted \(it handles: delivery"):
        deliver("packages", "delivery.requsted", requested_v1(uuid4()))
    first = deliver("packages", "delivery.requested", requested_v1(uuid4()))
    with pytest.raises(TypeError, match="an Envelope is handed as it is"):
        deliver("packages", first.envelope, sequence=2)
