"""The waiting line, in a chosen message order (real dispatch, no broker hop): wait, don't refuse."""

from datetime import datetime, timedelta
from uuid import UUID, uuid4

import pytest
from django.utils import timezone

from deliveries.models import Delivery
from deliveries.selectors import overdue_deliveries
from drones import services
from drones.geography import Point, distance_km
from drones.models import Assignment, Drone
from drones.scheduling import HEAD_OF_LINE, rank
from outbox.models import OutboxMessage
from outbox.testing import hand_over, pending, published, run_choreography
from packages.models import Package
from tests.factories import BASE, delivery_request


def requested(customer, **overrides) -> UUID:
    response = customer.request(delivery_request(**overrides))
    assert response.status_code == 202, response.json()
    return UUID(response.json()["deliveryId"])


def scheduled(customer, **overrides) -> UUID:
    """A delivery whose drone is reserved and whose package is ready, not yet dispatched."""
    delivery_id = requested(customer, **overrides)
    run_choreography(correlation_id=delivery_id, hold=("delivery.dispatched",))
    return delivery_id


def reserved_only(customer, **overrides) -> UUID:
    """A delivery whose drone is reserved while its package has not answered yet."""
    delivery_id = requested(customer, **overrides)
    hand_over("delivery.requested", correlation_id=delivery_id, to="drones")
    hand_over("drone.scheduled", correlation_id=delivery_id)
    assert Delivery.objects.get(id=delivery_id).status == "scheduled"
    return delivery_id


def waiting(customer, **overrides) -> UUID:
    delivery_id = requested(customer, **overrides)
    run_choreography(correlation_id=delivery_id)
    assert Delivery.objects.get(id=delivery_id).status == "waiting_for_drone"
    return delivery_id


def assignment(delivery_id) -> Assignment:
    return Assignment.objects.get(delivery_id=delivery_id)


def test_a_request_finding_every_capable_drone_busy_waits_and_is_told_when_a_drone_is_expected(customer, one_drone, db):
    first = requested(customer)
    run_choreography(correlation_id=first, hold=("drone.position_reported", "drone.arrived"))  # flying, its ETA known

    second = requested(customer)
    run_choreography(correlation_id=second)

    delivery = customer.get(f"/deliveries/{second}").json()
    assert (delivery["status"], delivery["statusReason"], delivery["droneId"]) == (
        "waiting_for_drone",
        "fleet_busy",
        None,
    )
    assert delivery["pickupEta"] is not None and delivery["waitingSince"] is not None
    status = customer.get(f"/deliveries/{second}/status").json()
    assert status["status"] == "waiting_for_drone" and status["pickupEta"] == delivery["pickupEta"]
    assert "drone.wait_listed" in [e["type"] for e in customer.get(f"/deliveries/{second}/timeline").json()]
    assert assignment(second).status == "waiting"


def test_when_the_busy_drone_is_released_it_takes_the_waiting_delivery_which_is_then_delivered(customer, one_drone, db):
    first = scheduled(customer)
    second = waiting(customer)

    run_choreography(correlation_id=first)  # flies, lands, completes, releases the drone

    assert Delivery.objects.get(id=first).status == "delivered"
    assert assignment(second).status == "reserved"
    run_choreography(correlation_id=second)
    delivery = Delivery.objects.get(id=second)
    assert delivery.status == "delivered" and delivery.drone_scheduled_at > delivery.waiting_since
    types = [e.type for e in published(correlation_id=second)]
    assert types.index("drone.wait_listed") < types.index("drone.scheduled") < types.index("delivery.dispatched")


def test_expedited_overtakes_normal_in_the_line(customer, one_drone, db):
    first = scheduled(customer)
    normal = waiting(customer)
    expedited = waiting(customer, expedited=True)

    run_choreography(correlation_id=first)

    assert (assignment(expedited).status, assignment(normal).status) == ("reserved", "waiting")
    run_choreography(correlation_id=expedited)
    assert assignment(normal).status == "reserved"


def test_the_nearest_deadline_goes_first_then_the_longest_waiting(customer, one_drone, db):
    first = scheduled(customer)
    soon = (timezone.now() + timedelta(minutes=5)).isoformat()
    earlier, later_deadline, tight = (
        waiting(customer),
        waiting(customer),
        waiting(customer, deadline=soon),
    )
    order = []
    settled = first
    for _ in range(3):
        run_choreography(correlation_id=settled)
        settled = Assignment.objects.get(status__in=["reserved", "flying"]).delivery_id
        order.append(settled)

    assert order == [tight, earlier, later_deadline]


def test_age_counts_a_long_wait_is_never_overtaken_forever(settings):
    settings.DRONE_QUEUE_AGING_SECONDS, settings.DRONE_EXPEDITED_HEAD_START_SECONDS = 900, 1800
    start = timezone.now()
    normal = rank(since=start, deadline=None, priority="normal")

    fresh_expedited = rank(since=start + timedelta(minutes=10), deadline=None, priority="high")
    late_expedited = rank(since=start + timedelta(minutes=46), deadline=None, priority="high")
    urgent_but_late = rank(since=start + timedelta(minutes=46), deadline=start + timedelta(minutes=47), priority="high")

    assert fresh_expedited < normal  # expedited first...
    assert normal < late_expedited and normal < urgent_but_late  # ...but not over one waiting 45 min already


def test_a_pickup_twenty_minutes_ahead_is_planned_and_no_drone_is_held_for_it(customer, fleet, db, settings):
    settings.DRONE_PICKUP_MARGIN_SECONDS = 60
    pickup = timezone.now() + timedelta(minutes=20)
    delivery_id = requested(customer, pickupTime=pickup.isoformat(), deadline=None)

    run_choreography(correlation_id=delivery_id)

    delivery = customer.get(f"/deliveries/{delivery_id}/status").json()
    assert (delivery["status"], delivery["statusReason"]) == ("waiting_for_drone", "pickup_planned")
    assert abs(datetime.fromisoformat(delivery["pickupEta"]) - pickup) < timedelta(milliseconds=1)
    planned = assignment(delivery_id)
    assert planned.status == "planned" and planned.drone_id is None
    assert Drone.objects.filter(status="available").count() == 3
    # Reserved in time for the nearest drone to fly to the pickup, with the margin: not earlier.
    timer = OutboxMessage.objects.get(type="drone.reservation_due", correlation_id=delivery_id)
    assert timer.available_at == planned.reserve_at
    before = (pickup - planned.reserve_at).total_seconds()
    assert 60 <= before < 61  # at test speed the drone's approach takes microseconds
    assert "delivery.dispatched" not in [e.type for e in published(correlation_id=delivery_id)]


def test_cancelling_a_planned_pickup_takes_its_reservation_timer_back(customer, fleet, db, settings):
    settings.DRONE_PICKUP_MARGIN_SECONDS = 60
    pickup = timezone.now() + timedelta(minutes=20)
    delivery_id = requested(customer, pickupTime=pickup.isoformat(), deadline=None)
    run_choreography(correlation_id=delivery_id)
    assert OutboxMessage.objects.filter(type="drone.reservation_due", correlation_id=delivery_id).exists()

    assert customer.cancel(delivery_id).status_code == 202
    run_choreography(correlation_id=delivery_id)

    assert assignment(delivery_id).status == "released"
    assert not OutboxMessage.objects.filter(type="drone.reservation_due", published_at__isnull=True).exists()


def test_a_future_pickup_waits_for_its_time_then_flies_no_earlier(customer, fleet, db, settings):
    from tests.waiting import wait_until

    settings.DRONE_PICKUP_MARGIN_SECONDS = 0.5
    pickup = timezone.now() + timedelta(seconds=5)  # planned before it, however slow the machine
    delivery_id = requested(customer, pickupTime=pickup.isoformat())
    run_choreography(correlation_id=delivery_id)
    assert assignment(delivery_id).status == "planned"

    wait_until(lambda: timezone.now() >= assignment(delivery_id).reserve_at, timeout=10, what="the planning time")
    run_choreography(correlation_id=delivery_id, hold=("drone.position_reported", "drone.arrived"))

    reserved = assignment(delivery_id)
    assert reserved.status == "flying" and reserved.takeoff_at >= pickup - timedelta(seconds=0.01)
    first_report = pending("drone.position_reported", correlation_id=delivery_id)[0]
    assert OutboxMessage.objects.get(message_id=first_report.message_id).available_at > reserved.takeoff_at
    wait_until(lambda: timezone.now() >= reserved.eta, timeout=10, what="the arrival")
    run_choreography(correlation_id=delivery_id)
    assert Delivery.objects.get(id=delivery_id).status == "delivered"


def test_cancelling_while_waiting_takes_the_delivery_out_of_the_line(customer, one_drone, db):
    first = scheduled(customer)
    second = waiting(customer)

    response = customer.cancel(second)
    assert response.status_code == 202 and response.json()["status"] == "cancelled"
    run_choreography(correlation_id=second)
    run_choreography(correlation_id=first)

    assert assignment(second).status == "released"
    assert Drone.objects.get().delivery_id is None
    assert Package.objects.get(delivery_id=second).status == "cancelled"


def test_rescheduling_a_waiting_delivery_to_a_later_pickup_plans_it_anew(customer, one_drone, db):
    first = scheduled(customer)
    second = waiting(customer)
    later = timezone.now() + timedelta(hours=1)

    response = customer.client.patch(
        f"/api/deliveryrequests/{second}", {"pickupTime": later.isoformat()}, content_type="application/json"
    )

    assert response.status_code == 202
    run_choreography(correlation_id=second)
    planned = assignment(second)
    assert (planned.status, planned.round, planned.pickup_time) == ("planned", 2, later)
    assert Delivery.objects.get(id=second).status_reason == "pickup_planned"
    run_choreography(correlation_id=first)
    assert Drone.objects.get().delivery_id is None  # the free drone does not take a pickup an hour ahead


def test_grounding_a_reserved_drone_puts_its_delivery_back_at_the_head_of_the_line(customer, one_drone, db):
    first = reserved_only(customer)
    second = waiting(customer, expedited=True)
    drone = Drone.objects.get()

    services.ground_drone(drone_id=drone.pk)

    requeued = assignment(first)
    assert (requeued.status, requeued.rank_at, requeued.drone_id) == ("waiting", HEAD_OF_LINE, None)
    run_choreography(correlation_id=first, hold=("delivery.dispatched",))
    assert Delivery.objects.get(id=first).status == "waiting_for_drone"

    services.return_drone_to_service(drone_id=drone.pk)

    assert (assignment(first).status, assignment(second).status) == ("reserved", "waiting")
    run_choreography(correlation_id=first)
    assert Delivery.objects.get(id=first).status == "delivered"


def test_a_drone_grounded_after_the_dispatch_was_decided_flies_it_as_soon_as_one_is_free(customer, one_drone, db):
    delivery_id = scheduled(customer)  # in transit for deliveries, not yet heard by the drones
    drone = Drone.objects.get()

    services.ground_drone(drone_id=drone.pk)
    run_choreography(correlation_id=delivery_id)
    assert (assignment(delivery_id).status, assignment(delivery_id).dispatched) == ("waiting", True)
    assert Delivery.objects.get(id=delivery_id).status == "in_transit"

    services.return_drone_to_service(drone_id=drone.pk)
    assert assignment(delivery_id).status == "flying"
    run_choreography(correlation_id=delivery_id)
    assert Delivery.objects.get(id=delivery_id).status == "delivered"


def test_a_new_drone_joining_the_fleet_takes_the_waiting_delivery(customer, one_drone, db):
    scheduled(customer)
    second = waiting(customer)

    services.seed_fleet(count=2, latitude=BASE[0], longitude=BASE[1])

    assert assignment(second).drone.name == "drone-002"


def test_a_waiting_delivery_whose_deadline_passes_fails_and_is_compensated(customer, one_drone, db):
    scheduled(customer)
    deadline = timezone.now() + timedelta(minutes=30)
    second = waiting(customer, deadline=deadline.isoformat())

    hand_over("delivery.deadline_passed", correlation_id=second)
    run_choreography(correlation_id=second)

    delivery = Delivery.objects.get(id=second)
    assert (delivery.status, delivery.status_reason) == ("failed", "deadline_missed")
    assert Package.objects.get(delivery_id=second).status == "cancelled"
    assert assignment(second).status == "released"


def test_a_delivery_without_deadline_waits_at_most_the_maximum_then_fails(customer, one_drone, db, settings):
    settings.DELIVERY_MAX_WAIT_SECONDS = 3600
    scheduled(customer)
    second = waiting(customer, deadline=None)
    timer = OutboxMessage.objects.get(type="delivery.wait_timed_out", correlation_id=second)
    pickup = Delivery.objects.get(id=second).pickup_time
    assert abs((timer.available_at - pickup).total_seconds() - 3600) < 5

    hand_over("delivery.wait_timed_out", correlation_id=second)
    run_choreography(correlation_id=second)

    delivery = Delivery.objects.get(id=second)
    assert (delivery.status, delivery.status_reason) == ("failed", "no_drone_available")
    assert assignment(second).status == "released"


def test_the_join_timeout_spares_a_delivery_that_is_waiting_with_its_package_ready(customer, one_drone, db):
    scheduled(customer)
    second = waiting(customer)
    assert Delivery.objects.get(id=second).package_ready

    hand_over("delivery.join_timed_out", correlation_id=second)

    assert Delivery.objects.get(id=second).status == "waiting_for_drone"


def test_the_join_timeout_fails_a_waiting_delivery_whose_package_never_answered(customer, one_drone, db):
    scheduled(customer)
    second = requested(customer)
    hand_over("delivery.requested", correlation_id=second, to="drones")
    hand_over("drone.wait_listed", correlation_id=second)

    hand_over("delivery.join_timed_out", correlation_id=second)

    assert Delivery.objects.get(id=second).status_reason == "join_timeout"


def test_after_a_drop_off_the_drone_is_where_it_landed_until_it_flies_home(customer, one_drone, db):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id, hold=("drone.returned_to_base",))

    drone = Drone.objects.get()
    dropoff = Delivery.objects.get(id=delivery_id).dropoff_location
    assert (drone.latitude, drone.longitude) == (dropoff["latitude"], dropoff["longitude"])
    assert (drone.latitude, drone.longitude) != (drone.home_latitude, drone.home_longitude)

    run_choreography(correlation_id=drone.pk)  # the drone's own story: its flight home
    drone.refresh_from_db()
    assert (drone.latitude, drone.longitude) == (drone.home_latitude, drone.home_longitude)


def test_a_stale_flight_home_after_a_newer_mission_leaves_the_drone_where_it_landed(customer, one_drone, db):
    """Each flight home names the drone's mission count when it left; the drone's missions must be
    saved at each reservation, or the first flight home, landing after a second delivery,
    would move the drone home while it still stands at the second drop-off."""
    first = requested(customer)
    run_choreography(correlation_id=first)
    second_dropoff = {"latitude": BASE[0] + 0.02, "longitude": BASE[1] - 0.02}
    second = requested(customer, dropOffLocation=second_dropoff)
    run_choreography(correlation_id=second)

    drone = Drone.objects.get()
    stale, latest = pending("drone.returned_to_base", correlation_id=drone.pk)  # both flights home, not yet landed

    hand_over(stale)
    drone.refresh_from_db()
    assert (drone.latitude, drone.longitude) == (second_dropoff["latitude"], second_dropoff["longitude"])

    hand_over(latest)
    drone.refresh_from_db()
    assert (drone.latitude, drone.longitude) == (drone.home_latitude, drone.home_longitude)
    assert (stale.payload["mission"], latest.payload["mission"], drone.missions) == (1, 2, 2)


def test_the_next_assignment_measures_from_where_the_drone_landed(customer, fleet, db):
    far_dropoff = {"latitude": BASE[0] + 0.1, "longitude": BASE[1] + 0.1}
    first = requested(customer, dropOffLocation=far_dropoff)
    run_choreography(correlation_id=first, hold=("drone.returned_to_base",))
    landed = Drone.objects.get(latitude=far_dropoff["latitude"])

    second = requested(customer, pickupLocation=far_dropoff)
    run_choreography(correlation_id=second, hold=("delivery.dispatched",))

    assert assignment(second).drone_id == landed.pk  # the one already there, though not the nearest home


def a_drone(name: str, *, home: Point, at: Point, range_km: float) -> Drone:
    return Drone.objects.create(
        id=uuid4(),
        name=name,
        max_payload_kg=10.0,
        range_km=range_km,
        speed_kmh=60.0,
        home_latitude=home.latitude,
        home_longitude=home.longitude,
        latitude=at.latitude,
        longitude=at.longitude,
    )


def test_the_nearest_drone_is_passed_over_when_it_could_not_fly_home_from_the_drop_off(db):
    def north(km: float) -> Point:
        return Point(BASE[0] + km / 111.195, BASE[1])

    home, pickup, dropoff = north(0), north(1), north(-11)
    assert (round(distance_km(pickup, dropoff)), round(distance_km(dropoff, home))) == (12, 11)
    a_drone("short-range", home=home, at=pickup, range_km=20)  # already at the pickup: 0 + 12 + 11 km is 23
    a_drone("long-range", home=north(-3), at=north(-3), range_km=40)  # 4 + 12 + 8 km

    delivery_id = uuid4()
    services.schedule_drone(delivery_id=delivery_id, pickup=pickup, dropoff=dropoff, weight_kg=1.0)

    reserved = assignment(delivery_id)
    assert (reserved.status, reserved.drone.name) == ("reserved", "long-range")
    assert Drone.objects.get(name="short-range").status == "available"


def test_a_parcel_exactly_at_a_drones_payload_limit_is_flown_by_it(db):
    """The free-drone probe and the nearest-drone search are SQL written by hand: a drone carries
    up to its payload limit, that weight included (`>=`), or the parcel would wait for ever."""
    drone = a_drone("at-its-limit", home=Point(*BASE), at=Point(*BASE), range_km=40)
    delivery_id = uuid4()
    services.schedule_drone(
        delivery_id=delivery_id,
        pickup=Point(BASE[0] + 0.01, BASE[1]),
        dropoff=Point(BASE[0] - 0.01, BASE[1]),
        weight_kg=drone.max_payload_kg,
    )

    reserved = assignment(delivery_id)
    assert (reserved.status, reserved.drone_id) == ("reserved", drone.pk)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"packageInfo": {"size": "Large", "weight": 50}}, "payload_exceeds_fleet"),
        ({"dropOffLocation": {"latitude": BASE[0] + 1.0, "longitude": BASE[1]}}, "out_of_range"),
    ],
)
def test_what_no_drone_could_ever_fly_fails_at_once_even_with_the_fleet_busy(
    customer, one_drone, db, overrides, reason
):
    scheduled(customer)
    delivery_id = requested(customer, **overrides)
    hand_over("delivery.requested", correlation_id=delivery_id, to="drones")
    hand_over("drone.unavailable", correlation_id=delivery_id)

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("failed", reason)


def test_a_delivery_dispatched_before_its_drone_was_grounded_is_flown_even_past_its_deadline(customer, one_drone, db):
    from tests.waiting import wait_until

    deadline = timezone.now() + timedelta(seconds=1)
    delivery_id = scheduled(customer, deadline=deadline.isoformat())  # in transit for deliveries
    drone = Drone.objects.get()
    services.ground_drone(drone_id=drone.pk)
    run_choreography(correlation_id=delivery_id)
    wait_until(lambda: timezone.now() > deadline, timeout=10, what="the deadline to pass")
    run_choreography(correlation_id=delivery_id)  # the deadline timer: it has left, so it does not fail

    services.return_drone_to_service(drone_id=drone.pk)
    run_choreography(correlation_id=delivery_id)

    assert Delivery.objects.get(id=delivery_id).status == "delivered"


def test_a_dispatched_delivery_left_without_a_drone_fails_after_the_longest_wait(customer, one_drone, db):
    delivery_id = scheduled(customer)
    services.ground_drone(drone_id=Drone.objects.get().pk)  # and never back
    run_choreography(correlation_id=delivery_id)
    delivery = customer.get(f"/deliveries/{delivery_id}").json()
    assert (delivery["status"], delivery["droneId"]) == ("in_transit", None)

    hand_over("delivery.wait_timed_out", correlation_id=delivery_id)
    run_choreography(correlation_id=delivery_id)

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("failed", "no_drone_available")
    assert assignment(delivery_id).status == "released"
    assert Package.objects.get(delivery_id=delivery_id).status == "cancelled"


def test_of_two_deadline_changes_arriving_out_of_order_the_newer_wins(customer, one_drone, db):
    scheduled(customer)
    delivery_id = waiting(customer)
    for hours in (5, 8):
        later = (timezone.now() + timedelta(hours=hours)).isoformat()
        response = customer.client.patch(
            f"/api/deliveryrequests/{delivery_id}", {"deadline": later}, content_type="application/json"
        )
        assert response.status_code == 202
    older, newer = pending("delivery.rescheduled", correlation_id=delivery_id, to="drones")

    hand_over(newer, to="drones")
    hand_over(older, to="drones")

    assert assignment(delivery_id).deadline == Delivery.objects.get(id=delivery_id).deadline


def test_the_customer_timeline_names_no_cause_from_another_delivery(customer, one_drone, db):
    first = scheduled(customer)
    second = waiting(customer)
    run_choreography(correlation_id=first)  # first's completion frees the drone, which takes second

    timeline = customer.get(f"/deliveries/{second}/timeline").json()

    scheduled_event = next(e for e in timeline if e["type"] == "drone.scheduled")
    assert scheduled_event["causationId"] is None
    assert OutboxMessage.objects.get(message_id=scheduled_event["messageId"]).causation_id is not None  # kept inside


def test_returning_a_free_drone_to_service_again_offers_it_to_the_line(customer, one_drone, db):
    first = scheduled(customer)
    second = waiting(customer)
    drone = Drone.objects.get()
    # As a rolled-back transaction leaves it: the drone free again, the delivery still in line.
    Assignment.objects.filter(delivery_id=first).update(status="released", drone=None)
    Drone.objects.filter(pk=drone.pk).update(status="available", delivery_id=None)

    services.return_drone_to_service(drone_id=drone.pk)  # a second click, on a drone already in service

    assert (assignment(second).status, assignment(second).drone_id) == ("reserved", drone.pk)


def test_a_waiting_delivery_that_lost_its_drone_gets_a_timer_and_is_overdue(customer, one_drone, db, settings):
    settings.DELIVERY_OVERDUE_AFTER_SECONDS = 0
    first = requested(customer)
    run_choreography(correlation_id=first, hold=("drone.position_reported", "drone.arrived"))
    second = waiting(customer, deadline=(timezone.now() + timedelta(hours=1)).isoformat())
    assert not OutboxMessage.objects.filter(correlation_id=second, type="delivery.wait_timed_out").exists()
    run_choreography(correlation_id=first)  # delivered: its drone takes the second one
    hand_over("drone.scheduled", correlation_id=second)  # dispatched, before the drones context hears of it
    assert Delivery.objects.get(id=second).status == "in_transit"

    services.ground_drone(drone_id=Drone.objects.get().pk)
    hand_over("drone.wait_listed", correlation_id=second)

    delivery = Delivery.objects.get(id=second)
    assert (delivery.status, delivery.drone_id) == ("in_transit", None)
    # Its deadline no longer fails it (it has left): the longest-wait timer is what bounds it now,
    assert OutboxMessage.objects.filter(correlation_id=second, type="delivery.wait_timed_out").count() == 1
    # and operators see it, though it has no ETA.
    assert list(overdue_deliveries().values_list("id", flat=True)) == [second]
    assert OutboxMessage.objects.filter(correlation_id=second, type="delivery.dispatched").count() == 1


def test_a_delivery_whose_drone_is_grounded_after_it_left_and_returned_is_dispatched_once(customer, one_drone, db):
    delivery_id = scheduled(customer)
    drone = Drone.objects.get()
    services.ground_drone(drone_id=drone.pk)
    run_choreography(correlation_id=delivery_id)
    services.return_drone_to_service(drone_id=drone.pk)  # reserved again, then scheduled news to deliveries
    run_choreography(correlation_id=delivery_id)

    assert Delivery.objects.get(id=delivery_id).status == "delivered"
    assert OutboxMessage.objects.filter(correlation_id=delivery_id, type="delivery.dispatched").count() == 1
    assert OutboxMessage.objects.filter(correlation_id=delivery_id, type="drone.arrived").count() == 1


def test_a_booked_pickup_that_finds_no_free_drone_is_ranked_by_its_pickup_time(customer, one_drone, db, settings):
    pickup = timezone.now() + timedelta(minutes=3)  # its timer fires a minute (the margin) before
    booked = requested(customer, pickupTime=pickup.isoformat(), deadline=None)
    run_choreography(correlation_id=booked)
    assert assignment(booked).status == "planned"
    first = scheduled(customer)  # the only drone is busy when the booked one's timer fires
    walk_ins = [waiting(customer, deadline=None) for _ in range(3)]

    services.reserve_planned(delivery_id=booked, round=1)
    services.reserve_planned(delivery_id=booked, round=1)
    Assignment.objects.filter(delivery_id=booked).update(replans=settings.DRONE_MAX_REPLANS)
    services.reserve_planned(delivery_id=booked, round=1)  # no replan left, no free drone: it joins the line

    line = list(Assignment.objects.filter(status="waiting").order_by("rank_at", "waiting_since"))
    assert [a.delivery_id for a in line] == [booked, *walk_ins]  # not behind the last minutes' walk-ins
    assert abs(assignment(booked).rank_at - pickup) < timedelta(milliseconds=1)
    later = assignment(booked)
    services.reschedule_drone(  # a new deadline alone, well after the pickup: the place in line holds
        delivery_id=booked,
        round=1,
        pickup=Point(later.pickup_latitude, later.pickup_longitude),
        dropoff=Point(later.dropoff_latitude, later.dropoff_longitude),
        weight_kg=later.weight_kg,
        pickup_time=pickup,
        deadline=pickup + timedelta(hours=5),
        change=later.change + 1,
    )
    assert abs(assignment(booked).rank_at - pickup) < timedelta(milliseconds=1)
    run_choreography(correlation_id=first)
    assert assignment(booked).status == "reserved"


def test_a_later_pickup_while_every_capable_drone_is_grounded_is_planned_not_put_in_line(customer, one_drone, db):
    drone = Drone.objects.get()
    services.ground_drone(drone_id=drone.pk)
    later = requested(customer, pickupTime=(timezone.now() + timedelta(days=30)).isoformat(), deadline=None)
    run_choreography(correlation_id=later)

    assert assignment(later).status == "planned"
    services.return_drone_to_service(drone_id=drone.pk)
    assert Drone.objects.get().status == "available"  # not held for a month


def test_a_planned_pickups_drone_takes_off_so_as_to_reach_the_pickup_at_its_time(customer, fleet, settings):
    settings.DRONE_SIMULATION_SPEEDUP = 1  # real flight times: the approach takes minutes, not microseconds
    pickup = timezone.now() + timedelta(hours=2)
    delivery_id = requested(customer, pickupTime=pickup.isoformat(), deadline=None)
    hand_over("delivery.requested", correlation_id=delivery_id, to="drones")
    Assignment.objects.filter(delivery_id=delivery_id).update(replans=settings.DRONE_MAX_REPLANS)

    services.reserve_planned(delivery_id=delivery_id, round=1)

    reserved = assignment(delivery_id)
    drone = reserved.drone
    approach = distance_km(
        Point(drone.latitude, drone.longitude), Point(reserved.pickup_latitude, reserved.pickup_longitude)
    )
    approach_seconds = approach / drone.speed_kmh * 3600
    assert approach_seconds > 60  # what the test is about: an approach long enough to matter
    assert abs((reserved.takeoff_at - (pickup - timedelta(seconds=approach_seconds))).total_seconds()) < 0.01
    assert abs((reserved.expected_pickup_at - pickup).total_seconds()) < 0.01  # at the pickup at its time
