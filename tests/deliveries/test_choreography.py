"""The workflow, with the order of messages chosen by the test (real dispatch, no broker hop)."""

from datetime import timedelta
from uuid import UUID

from django.db.models import F

from deliveries.models import Delivery
from drones.models import Assignment, Drone
from notifications.models import Notification
from outbox.handling.dispatch import Outcome, dispatch
from outbox.models import InboxMessage, OutboxMessage, StreamCursor
from outbox.testing import deliver, hand_over, pending, published, run_choreography
from packages.models import Package
from tests.factories import arrived_after_the_deadline, delivery_request, requested


def status(delivery_id) -> str:
    return Delivery.objects.get(id=delivery_id).status


def test_drone_first_then_package_goes_requested_scheduled_in_transit_delivered(customer, fleet, db):
    delivery_id = requested(customer)
    assert status(delivery_id) == "requested"

    hand_over("delivery.requested", correlation_id=delivery_id, to="drones")
    hand_over("drone.scheduled", correlation_id=delivery_id)
    assert status(delivery_id) == "scheduled"

    hand_over("delivery.requested", correlation_id=delivery_id, to="packages")
    hand_over("package.ready", correlation_id=delivery_id)
    assert status(delivery_id) == "in_transit"

    run_choreography(correlation_id=delivery_id)
    assert status(delivery_id) == "delivered"
    assert [e.type for e in published(correlation_id=delivery_id)].count("delivery.dispatched") == 1
    assert Drone.objects.filter(status="available").count() == 3
    assert Package.objects.get(delivery_id=delivery_id).status == "delivered"


def test_package_first_then_drone_dispatches_once(customer, fleet, db):
    delivery_id = requested(customer)

    hand_over("delivery.requested", correlation_id=delivery_id, to="packages")
    hand_over("package.ready", correlation_id=delivery_id)
    assert status(delivery_id) == "requested"
    assert Delivery.objects.get(id=delivery_id).package_ready

    hand_over("delivery.requested", correlation_id=delivery_id, to="drones")
    hand_over("drone.scheduled", correlation_id=delivery_id)
    assert status(delivery_id) == "in_transit"

    run_choreography(correlation_id=delivery_id)
    assert status(delivery_id) == "delivered"
    assert [e.type for e in published(correlation_id=delivery_id)].count("delivery.dispatched") == 1


def test_a_rejected_package_fails_the_delivery_and_releases_its_drone(customer, fleet, db):
    response = customer.request(delivery_request(packageInfo={"size": "Small", "weight": 3.5}))
    delivery_id = UUID(response.json()["deliveryId"])

    run_choreography(correlation_id=delivery_id)

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("failed", "too_heavy")
    assert Assignment.objects.get(delivery_id=delivery_id).status == "released"
    assert Drone.objects.filter(status="available").count() == 3
    assert "drone_released" in delivery.compensations
    types = [e.type for e in published(correlation_id=delivery_id)]
    assert types.index("package.rejected") < types.index("delivery.failed") < types.index("drone.released")


def test_no_drone_fails_the_delivery_and_cancels_its_package(customer, db):
    delivery_id = requested(customer)  # no fleet at all

    run_choreography(correlation_id=delivery_id)

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("failed", "payload_exceeds_fleet")
    assert Package.objects.get(delivery_id=delivery_id).status == "cancelled"
    assert delivery.compensations == ["package_cancelled"]


def test_cancel_before_dispatch_releases_the_drone_and_cancels_the_package(customer, fleet, db):
    delivery_id = requested(customer)
    hand_over("delivery.requested", correlation_id=delivery_id)
    hand_over("drone.scheduled", correlation_id=delivery_id)
    assert Drone.objects.filter(status="reserved").count() == 1
    assert customer.get(f"/deliveries/{delivery_id}/status").json()["pickupEta"] is not None

    response = customer.cancel(delivery_id)
    assert response.status_code == 202
    assert response.json()["status"] == "cancelled"
    run_choreography(correlation_id=delivery_id)
    shown = customer.get(f"/deliveries/{delivery_id}/status").json()
    assert (shown["pickupEta"], shown["deliveryEta"]) == (None, None)  # no drone is coming

    assert Drone.objects.filter(status="available").count() == 3
    assert Package.objects.get(delivery_id=delivery_id).status == "cancelled"
    assert sorted(Delivery.objects.get(id=delivery_id).compensations) == ["drone_released", "package_cancelled"]
    assert status(delivery_id) == "cancelled"


def test_a_late_ready_package_cannot_resurrect_a_cancelled_delivery(customer, fleet, db):
    delivery_id = requested(customer)
    assert customer.cancel(delivery_id).status_code == 202
    hand_over("delivery.cancelled", correlation_id=delivery_id)  # compensations run before the request arrives

    run_choreography(correlation_id=delivery_id)

    assert status(delivery_id) == "cancelled"
    assert Drone.objects.filter(status="available").count() == 3
    assert "drone.scheduled" not in [e.type for e in published(correlation_id=delivery_id)]


def test_cancel_in_transit_is_refused_with_409(customer, fleet, db):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("delivery.dispatched",))
    assert status(delivery_id) == "in_transit"

    response = customer.cancel(delivery_id)

    assert response.status_code == 409
    assert "in_transit" in response.json()["detail"]
    assert status(delivery_id) == "in_transit"


def test_a_stale_position_report_does_not_overwrite_a_newer_one(customer, fleet, db):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("drone.position_reported", "drone.arrived"))
    first, *_, last = pending("drone.position_reported", correlation_id=delivery_id)

    assert first.payload["latitude"] != last.payload["latitude"]

    hand_over(last)  # the newer report arrives first
    hand_over(first)

    delivery = Delivery.objects.get(id=delivery_id)
    assert delivery.last_known_location["latitude"] == last.payload["latitude"]
    assert InboxMessage.objects.filter(message_id=first.message_id, subscriber="deliveries").exists()
    cursor = StreamCursor.objects.get(subscriber="deliveries", stream=f"flight:{delivery_id}")
    assert (cursor.last_sequence, cursor.stale, cursor.gaps) == (last.sequence, 1, last.sequence - 1)


def test_reports_in_order_leave_no_gap_and_a_skipped_one_is_logged_and_counted(customer, fleet, db, caplog):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("drone.position_reported", "drone.arrived"))
    first, second, third = pending("drone.position_reported", correlation_id=delivery_id)

    hand_over(first)
    hand_over(third)  # the second is late

    cursor = StreamCursor.objects.get(subscriber="deliveries", stream=f"flight:{delivery_id}")
    assert (cursor.last_sequence, cursor.gaps, cursor.stale) == (third.sequence, 1, 0)
    assert f"deliveries saw a gap in flight:{delivery_id}: #3 after #1" in caplog.text
    hand_over(second)
    assert StreamCursor.objects.get(pk=cursor.pk).stale == 1
    assert Delivery.objects.get(id=delivery_id).last_known_location["latitude"] == third.payload["latitude"]


def test_an_arrival_handled_before_the_last_reports_counts_no_gap_and_warns_of_nothing(customer, fleet, db, caplog):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("drone.position_reported", "drone.arrived"))
    reports = pending("drone.position_reported", correlation_id=delivery_id)
    (arrived,) = pending("drone.arrived", correlation_id=delivery_id)
    due = {m.message_id: m.available_at for m in OutboxMessage.objects.filter(correlation_id=delivery_id)}
    assert max(due[r.message_id] for r in reports) < due[arrived.message_id]  # no report is due with the arrival

    hand_over(reports[0])
    hand_over(arrived)  # workers handled it first
    for report in reports[1:]:
        hand_over(report)

    assert status(delivery_id) == "delivered"
    cursor = StreamCursor.objects.get(subscriber="deliveries", stream=f"flight:{delivery_id}")
    assert (cursor.gaps, cursor.stale) == (0, 0)  # nothing that reads like an incident in the overview
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_position_reports_handled_after_the_arrival_leave_the_delivery_at_its_drop_off(customer, fleet, db):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("drone.position_reported", "drone.arrived"))
    reports = pending("drone.position_reported", correlation_id=delivery_id)
    (arrived,) = pending("drone.arrived", correlation_id=delivery_id)
    hand_over(arrived)  # workers handled the arrival before every report of the flight
    at_the_drop_off = Delivery.objects.get(id=delivery_id).last_known_location
    assert (at_the_drop_off["latitude"], at_the_drop_off["longitude"]) == (
        arrived.payload["latitude"],
        arrived.payload["longitude"],
    )

    for report in reports:
        hand_over(report)

    assert all(r.payload["latitude"] != arrived.payload["latitude"] for r in reports)  # each one short of it
    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.last_known_location) == ("delivered", at_the_drop_off)


def test_an_arrival_after_the_deadline_is_delivered_late_never_on_time(customer, fleet, db):
    delivery_id = requested(customer)
    arrived_after_the_deadline(delivery_id)

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("delivered", "late")
    assert customer.get(f"/deliveries/{delivery_id}/status").json()["statusReason"] == "late"


def test_notifications_record_one_per_delivery_and_kind(customer, fleet, db):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id)
    completed = [e.type for e in published(correlation_id=delivery_id)].index("delivery.completed")
    assert completed

    assert sorted(Notification.objects.filter(delivery_id=delivery_id).values_list("kind", flat=True)) == [
        "completed",
        "dispatched",
    ]


def test_the_timeline_lists_events_in_causal_order_with_their_subscribers(customer, fleet, db):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id)

    timeline = customer.get(f"/deliveries/{delivery_id}/timeline").json()

    by_id = {e["messageId"]: i for i, e in enumerate(timeline)}
    uncaused = [e["type"] for e in timeline if e["causationId"] is None]  # what the request itself published
    assert uncaused == ["delivery.requested", "delivery.status_changed"] and timeline[0]["type"] == "delivery.requested"
    for position, event in enumerate(timeline[1:], start=1):
        if event["causationId"] is not None:
            assert by_id[event["causationId"]] < position, f"{event['type']} listed before its cause"
    first = timeline[0]
    assert first["publishedBy"] == "deliveries"
    assert {(s["subscriber"], s["outcome"]) for s in first["subscribers"]} == {
        ("drones", "processed"),
        ("packages", "processed"),
    }
    types = [e["type"] for e in timeline]
    assert types.index("drone.arrived") < types.index("delivery.completed") < types.index("drone.released")
    assert all(s["outcome"] == "processed" for e in timeline for s in e["subscribers"])


def test_the_timeline_keeps_each_cause_before_its_effects_when_a_hosts_clock_runs_ahead(customer, fleet, db):
    delivery_id = requested(customer)
    request = OutboxMessage.objects.get(correlation_id=delivery_id, type="delivery.requested")
    # The web host that took it runs 10 s ahead of the workers: so does all it published with it.
    OutboxMessage.objects.filter(correlation_id=delivery_id).update(
        occurred_at=F("occurred_at") + timedelta(seconds=10)
    )
    run_choreography(correlation_id=delivery_id)

    timeline = customer.get(f"/deliveries/{delivery_id}/timeline").json()

    by_id = {e["messageId"]: i for i, e in enumerate(timeline)}
    for position, event in enumerate(timeline):
        cause = event["causationId"]
        assert cause is None or by_id[cause] < position, f"{event['type']} listed before its cause"
    assert timeline[0]["messageId"] == str(request.message_id)  # the request, though stamped 10 s later


def test_the_release_and_cancel_compensations_report_failure_as_compensation_failed():
    from outbox.core.subscriptions import subscription

    compensations = [
        ("drones", "delivery.failed"),
        ("drones", "delivery.cancelled"),
        ("packages", "delivery.failed"),
        ("packages", "delivery.cancelled"),
    ]
    assert all(subscription(s, t).compensation for s, t in compensations)
    assert not subscription("drones", "delivery.requested").compensation


def test_a_compensation_runs_once_however_often_its_event_is_delivered(customer, fleet, db):
    delivery_id = requested(customer)
    hand_over("delivery.requested", correlation_id=delivery_id)
    customer.cancel(delivery_id)
    cancelled = pending("delivery.cancelled", correlation_id=delivery_id)[0]

    for _ in range(3):
        deliver("drones", cancelled)
        deliver("packages", cancelled)

    assert [e.type for e in published(correlation_id=delivery_id)].count("drone.released") == 1
    assert [e.type for e in published(correlation_id=delivery_id)].count("package.cancelled") == 1
    assert InboxMessage.objects.get(subscriber="drones", message_id=cancelled.message_id).duplicates == 2


def test_a_replayed_report_older_than_one_applied_is_dropped_and_its_letter_says_so(customer, fleet, db):
    from outbox.console.dead_letter_actions import replay_dead_letter
    from outbox.core.dead_letters import record_dead_letter
    from outbox.models import DeadLetter, OutboxMessage

    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("drone.position_reported", "drone.arrived"))
    first, second, third = pending("drone.position_reported", correlation_id=delivery_id)
    hand_over(first)
    letter = record_dead_letter(subscriber="deliveries", body=second.model_dump(mode="json"), reason="handler_error")
    hand_over(third)  # the stream moves on past the failed one

    replay_dead_letter(letter_id=letter.pk, by="ops")
    replayed = OutboxMessage.objects.get(message_id=second.message_id, target_subscriber="deliveries")
    assert dispatch(subscriber="deliveries", body=replayed.envelope()) is Outcome.STALE

    letter.refresh_from_db()
    assert letter.status == "discarded" and "dropped on replay" in letter.note and letter.resolved_by == "dispatch"
    assert Delivery.objects.get(id=delivery_id).last_known_location["latitude"] == third.payload["latitude"]
    assert not DeadLetter.objects.filter(status="open").exists()
