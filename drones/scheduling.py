"""The scheduler's decisions, run inside the caller's transaction: plan, reserve, wait, find work.

A delivery gets the nearest free drone that can fly it; when there is none it joins the
waiting line, and a drone that becomes free takes the first delivery in line that it can fly.
A later pickup is planned instead: a timer reserves a drone just in time to reach the pickup
at its pickup time. Every decision publishes what the deliveries context needs to know.
"""

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from drones import fleet_check, matching
from drones.events import (
    DroneReleased,
    DroneReservationDue,
    DroneReturnedToBase,
    DroneScheduled,
    DroneUnavailable,
    DroneWaitListed,
)
from drones.flights import flight_seconds, take_off
from drones.geography import Point, distance_km, route_km
from drones.models import Assignment, Drone
from outbox.api import insert_row, locked_row, publish, save_fields

# A grounded drone's delivery goes back to the head of the line: no rank is earlier than this.
HEAD_OF_LINE = datetime(2000, 1, 1, tzinfo=UTC)
# Estimates look at no more busy drones than this.
ESTIMATE_HORIZON = 500


def rank(*, since: datetime, deadline: datetime | None, priority: str) -> datetime:
    """A waiting delivery's place in line: the earlier of its deadline and the moment it will have waited
    DRONE_QUEUE_AGING_SECONDS, brought forward by DRONE_EXPEDITED_HEAD_START_SECONDS when expedited.

    So expedited goes first, then the nearest deadline, then the longest waiting; and as every
    rank is at most `since + aging`, a delivery that has waited aging + head start is ahead of
    anything that arrives after, however expedited: no one starves.
    """
    place = since + timedelta(seconds=settings.DRONE_QUEUE_AGING_SECONDS)
    if deadline is not None:
        place = min(place, deadline)
    if priority == "high":
        place -= timedelta(seconds=settings.DRONE_EXPEDITED_HEAD_START_SECONDS)
    return place


def _pickup(assignment: Assignment) -> Point:
    return Point(assignment.pickup_latitude, assignment.pickup_longitude)


def _dropoff(assignment: Assignment) -> Point:
    return Point(assignment.dropoff_latitude, assignment.dropoff_longitude)


def position(drone: Drone) -> Point:
    return Point(drone.latitude, drone.longitude)


def home(drone: Drone) -> Point:
    return Point(drone.home_latitude, drone.home_longitude)


def _save(assignment: Assignment) -> None:
    """A new assignment is inserted, never saved by an UPDATE first: a tombstone that a concurrent
    cancellation committed meanwhile (keyed by the same delivery) is then a conflict, retried,
    instead of being silently overwritten by a live reservation."""
    if assignment._state.adding:
        insert_row(assignment)
    else:
        assignment.save()


def _announce(assignment: Assignment, event) -> None:
    """The assignment's own stream, so the deliveries context applies its news in order."""
    publish(event, stream=f"assignment:{assignment.delivery_id}", correlation_id=assignment.delivery_id)


def plan(assignment: Assignment, *, head_of_line: bool = False) -> None:
    """Decide what happens to a new (or re-planned) assignment."""
    now = timezone.now()
    if not head_of_line and _plan_for_later(assignment, now):
        return
    assign_or_wait(assignment, now=now, head_of_line=head_of_line)


def _plan_for_later(assignment: Assignment, now: datetime) -> bool:
    """A pickup far enough ahead is not served now: a timer comes back for it in time."""
    if assignment.pickup_time is None or assignment.pickup_time <= now:
        return False
    # Where a drone is likely to come from: any of the fleet, those in maintenance too. A pickup a month
    # ahead while every capable drone is grounded is planned like any other, never put in the line,
    # where the first drone back would be held for it for a month.
    nearest = matching.nearest_drone(assignment, free=False, lock=False, maintenance=True)
    if nearest is None:
        return False  # nothing could fly it: assign_or_wait says why
    reserve_at = _reserve_at(assignment, nearest)
    if reserve_at <= now:
        return False
    _plan_reservation(assignment, reserve_at)
    _announce_waiting(assignment, reason="pickup_planned", expected_pickup_at=assignment.pickup_time)
    return True


def _reserve_at(assignment: Assignment, drone: Drone) -> datetime:
    """When to reserve `drone` so that it reaches the pickup at pickup time, with a margin."""
    approach = flight_seconds(distance_km(position(drone), _pickup(assignment)), drone)
    return assignment.pickup_time - timedelta(seconds=approach + settings.DRONE_PICKUP_MARGIN_SECONDS)


def reservation_timer_stream(delivery_id) -> str:
    """The stream of a planned delivery's reservation timer, which its release takes back."""
    return f"assignment:{delivery_id}:timer"


def _plan_reservation(assignment: Assignment, reserve_at: datetime) -> None:
    assignment.status, assignment.reserve_at = Assignment.Status.PLANNED, reserve_at
    _save(assignment)
    publish(
        DroneReservationDue(delivery_id=assignment.delivery_id, round=assignment.round),
        stream=reservation_timer_stream(assignment.delivery_id),
        correlation_id=assignment.delivery_id,
        available_at=reserve_at,
    )


def reserve_planned(assignment: Assignment) -> None:
    """The planning timer fired: reserve the nearest free drone, or come back later if it is nearer than
    expected (at most DRONE_MAX_REPLANS times), or join the line."""
    now = timezone.now()
    # Looked at without a lock: a drone this timer puts off must not be hidden from others meanwhile.
    nearest = matching.nearest_drone(assignment, lock=False)
    if nearest is not None and assignment.replans < settings.DRONE_MAX_REPLANS:
        reserve_at = _reserve_at(assignment, nearest)
        if (reserve_at - now).total_seconds() > settings.DRONE_PICKUP_MARGIN_SECONDS:
            assignment.replans += 1
            _plan_reservation(assignment, reserve_at)
            return
    assign_or_wait(assignment, now=now)


def assign_or_wait(assignment: Assignment, *, now: datetime, head_of_line: bool = False) -> None:
    """Reserve the nearest free drone; refuse what no drone could ever fly; otherwise wait in line."""
    drone = matching.nearest_drone(assignment)
    if drone is None:
        reason = matching.reason_never_served(assignment)
        if reason is not None:
            assignment.status, assignment.reason = Assignment.Status.REFUSED, reason
            _save(assignment)
            _announce(
                assignment,
                DroneUnavailable(delivery_id=assignment.delivery_id, reason=reason, round=assignment.round),
            )
            return
        matching.lock_the_waiting_line()
        drone = matching.nearest_drone(assignment)
    if drone is not None:
        reserve(drone, assignment, now=now)
    else:
        _wait(assignment, now=now, head_of_line=head_of_line)


def offer_drone(assignment: Assignment) -> None:
    """Look for a drone once more for a delivery that stays in line after its (locked) row was touched.

    While a transaction holds a waiting row, a drone looking for work skips it and may go idle;
    looking again here, through the same lock, means one of the two finds the other.
    """
    if assignment.status != Assignment.Status.WAITING:
        return
    drone = matching.nearest_drone(assignment)
    if drone is None:
        matching.lock_the_waiting_line()
        drone = matching.nearest_drone(assignment)
    if drone is not None:
        reserve(drone, assignment, now=timezone.now())


def place_in_line(assignment: Assignment, *, now: datetime) -> datetime:
    """The rank of a delivery joining (or in) the line: from when it started waiting, except a booked
    pickup whose reservation found no free drone, which has waited, in effect, since it was booked:
    it takes its place by its pickup time, not behind the walk-ins of the last minutes."""
    since = assignment.waiting_since or now
    if assignment.reserve_at is not None and assignment.pickup_time is not None:
        since = min(since, assignment.pickup_time - timedelta(seconds=settings.DRONE_QUEUE_AGING_SECONDS))
    return rank(since=since, deadline=assignment.deadline, priority=assignment.priority)


def _wait(assignment: Assignment, *, now: datetime, head_of_line: bool) -> None:
    assignment.status, assignment.drone = Assignment.Status.WAITING, None
    assignment.waiting_since = assignment.waiting_since or now
    assignment.rank_at = HEAD_OF_LINE if head_of_line else place_in_line(assignment, now=now)
    assignment.expected_pickup_at = _expected_pickup(assignment, now=now)
    _save(assignment)
    _announce_waiting(assignment, reason="fleet_busy", expected_pickup_at=assignment.expected_pickup_at)
    fleet_check.keep_running(now=now)


def _announce_waiting(assignment: Assignment, *, reason: str, expected_pickup_at: datetime | None) -> None:
    _announce(
        assignment,
        DroneWaitListed(
            delivery_id=assignment.delivery_id,
            round=assignment.round,
            reason=reason,
            expected_pickup_at=expected_pickup_at,
        ),
    )


def _expected_pickup(assignment: Assignment, *, now: datetime) -> datetime | None:
    """An estimate: the busy drones that could carry it come free at their ETAs, one for each delivery
    ahead in line, each taking about as long as this one; None when no capable drone is busy."""
    waiting = Assignment.objects.filter(status=Assignment.Status.WAITING)
    # Counted up to the horizon through the line's index: the estimate looks no further anyway.
    ahead = waiting.filter(rank_at__lt=assignment.rank_at)[:ESTIMATE_HORIZON].count()
    busy = (
        Assignment.objects.filter(
            status__in=[Assignment.Status.RESERVED, Assignment.Status.FLYING],
            drone__max_payload_kg__gte=assignment.weight_kg,
            eta__isnull=False,
        )
        .order_by("eta")
        .values_list("eta", "drone__speed_kmh")
    )[: min(ahead + 1, ESTIMATE_HORIZON)]
    busy = list(busy)
    if not busy:
        return None
    free_at, speed = busy[ahead % len(busy)]
    mission = 2 * assignment.trip_km / speed * 3600 / settings.DRONE_SIMULATION_SPEEDUP
    return max(now, free_at) + timedelta(seconds=mission * (ahead // len(busy)) + mission / 2)


def reserve(drone: Drone, assignment: Assignment, *, now: datetime) -> None:
    """Give `assignment` the (locked, free) `drone`; it takes off in time to be at the pickup at pickup time."""
    drone.status, drone.delivery_id, drone.missions = Drone.Status.RESERVED, assignment.delivery_id, drone.missions + 1
    save_fields(drone, ["status", "delivery_id", "missions", "updated_at"])
    approach = flight_seconds(distance_km(position(drone), _pickup(assignment)), drone)
    takeoff = now
    if assignment.pickup_time is not None:
        takeoff = max(now, assignment.pickup_time - timedelta(seconds=approach))
    whole_flight = flight_seconds(route_km(position(drone), _pickup(assignment), _dropoff(assignment)), drone)
    assignment.drone, assignment.status, assignment.takeoff_at = drone, Assignment.Status.RESERVED, takeoff
    assignment.eta = takeoff + timedelta(seconds=whole_flight)
    assignment.expected_pickup_at = takeoff + timedelta(seconds=approach)
    _save(assignment)
    _announce(
        assignment,
        DroneScheduled(
            delivery_id=assignment.delivery_id,
            drone_id=drone.id,
            eta=assignment.eta,
            pickup_eta=assignment.expected_pickup_at,
            round=assignment.round,
        ),
    )
    if assignment.dispatched:  # the delivery left without waiting for this drone's news: fly at once
        take_off(assignment, drone)


def locked_drone(drone_id) -> Drone:
    """An assignment's drone, locked (as `.get()` does, its absence is an error of its own)."""
    drone = locked_row(Drone, drone_id)
    if drone is None:
        raise Drone.DoesNotExist(f"drone {drone_id} does not exist")
    return drone


def free(assignment: Assignment, *, reason: str) -> Drone:
    """Give the assignment's drone back to the fleet, where it is now, and say so (`drone.released`)."""
    drone = locked_drone(assignment.drone_id)
    if drone.delivery_id == assignment.delivery_id:
        drone.delivery_id = None
        if assignment.status == Assignment.Status.FLYING:  # it landed at the drop-off
            drone.latitude, drone.longitude = assignment.dropoff_latitude, assignment.dropoff_longitude
        if drone.status != Drone.Status.MAINTENANCE:
            drone.status = Drone.Status.AVAILABLE
        save_fields(drone, ["status", "delivery_id", "latitude", "longitude", "updated_at"])
    publish(
        DroneReleased(delivery_id=assignment.delivery_id, drone_id=drone.id, reason=reason),
        stream=f"drone:{drone.id}",
        correlation_id=assignment.delivery_id,
    )
    return drone


def find_work(drone: Drone, *, fly_home: bool = True) -> Assignment | None:
    """A (locked) drone has just become free: take the first delivery in line it can fly, or rest.

    Every transaction that holds a free drone's row and leaves it free ends here, so that a
    delivery that skipped the locked drone meanwhile is found. Resting away from home means
    flying home: `drone.returned_to_base` is published for the moment it lands there.
    """
    if drone.status != Drone.Status.AVAILABLE or drone.delivery_id is not None:
        return None
    now = timezone.now()
    assignment = matching.next_waiting_for(drone, now=now)
    if assignment is None:
        matching.lock_the_waiting_line()
        assignment = matching.next_waiting_for(drone, now=now)
    if assignment is not None:
        reserve(drone, assignment, now=now)
        return assignment
    if fly_home and position(drone) != home(drone):
        publish(
            DroneReturnedToBase(drone_id=drone.id, mission=drone.missions),
            stream=f"drone:{drone.id}",
            correlation_id=drone.id,  # the drone's own story, not the delivery's it has finished
            available_at=now + timedelta(seconds=flight_seconds(distance_km(position(drone), home(drone)), drone)),
        )
    return None
