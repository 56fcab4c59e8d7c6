"""Drone scheduler use cases: each one transaction, its events inside it."""

import math
import uuid
from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from django.utils import timezone

from drones import fleet_check, scheduling
from drones.events import DroneGrounded, DronePackageReturned, DroneReturnedToService
from drones.flights import take_off
from drones.geography import Point, distance_km
from drones.models import Assignment, Drone
from outbox.api import atomic, locked_row, publish, save_fields, withdraw_scheduled

FLEET_NAMESPACE = uuid.UUID("6f1c9f5e-4a35-4c1e-9a53-0d2a3c1b8e77")
BEFORE_TAKEOFF = (Assignment.Status.PLANNED, Assignment.Status.WAITING, Assignment.Status.RESERVED)


def _locked(delivery_id: UUID) -> Assignment | None:
    return locked_row(Assignment, delivery_id)


def _untouched(assignment: Assignment | None) -> Assignment | None:
    """Leave a locked assignment as it was; one still in line looks for a drone once more (see offer_drone)."""
    if assignment is not None:
        scheduling.offer_drone(assignment)
    return assignment


def _new_assignment(
    *,
    delivery_id: UUID,
    round: int,
    pickup: Point,
    dropoff: Point,
    weight_kg: float,
    priority: str,
    pickup_time: datetime | None,
    deadline: datetime | None,
) -> Assignment:
    return Assignment(
        delivery_id=delivery_id,
        round=round,
        priority=priority,
        pickup_latitude=pickup.latitude,
        pickup_longitude=pickup.longitude,
        dropoff_latitude=dropoff.latitude,
        dropoff_longitude=dropoff.longitude,
        trip_km=distance_km(pickup, dropoff),
        weight_kg=weight_kg,
        pickup_time=pickup_time,
        deadline=deadline,
    )


def schedule_drone(
    *,
    delivery_id: UUID,
    pickup: Point,
    dropoff: Point,
    weight_kg: float,
    priority: str = "normal",
    pickup_time: datetime | None = None,
    deadline: datetime | None = None,
) -> Assignment:
    """Reserve the nearest free drone that can fly it, plan a later pickup, put it in line, or say why never."""
    with atomic("drones"):
        existing = _locked(delivery_id)
        if existing is not None:  # handled before, rescheduled first, or the delivery already ended (tombstone)
            return _untouched(existing)
        assignment = _new_assignment(
            delivery_id=delivery_id,
            round=1,
            pickup=pickup,
            dropoff=dropoff,
            weight_kg=weight_kg,
            priority=priority,
            pickup_time=pickup_time,
            deadline=deadline,
        )
        scheduling.plan(assignment)
        return assignment


def reschedule_drone(
    *,
    delivery_id: UUID,
    round: int,
    pickup: Point,
    dropoff: Point,
    weight_kg: float,
    priority: str = "normal",
    pickup_time: datetime | None = None,
    deadline: datetime | None = None,
    change: int = 0,
) -> Assignment | None:
    """The customer changed the delivery before take-off (`change`: its number in the delivery's stream).

    New places or a new pickup time come as a new round: the drone (if any) is released and the
    delivery planned again. A new deadline alone keeps the round and only moves its place in line;
    of two such changes arriving out of order, the older is moot.
    """
    with atomic("drones"):
        existing = _locked(delivery_id)
        if existing is not None and existing.round >= round:
            if existing.round == round and change > existing.change:
                existing.change = change
                _move_deadline(existing, deadline)
            return _untouched(existing)  # seen already
        if existing is not None and existing.status not in (*BEFORE_TAKEOFF, Assignment.Status.REFUSED):
            return existing  # the delivery ended or took off meanwhile
        freed = None
        if existing is not None:
            if existing.status == Assignment.Status.RESERVED:
                freed = scheduling.free(existing, reason="rescheduled")
            existing.delete()
        assignment = _new_assignment(
            delivery_id=delivery_id,
            round=round,
            pickup=pickup,
            dropoff=dropoff,
            weight_kg=weight_kg,
            priority=priority,
            pickup_time=pickup_time,
            deadline=deadline,
        )
        assignment.change = change
        scheduling.plan(assignment)
        if freed is not None:
            scheduling.find_work(Drone.objects.select_for_update().get(pk=freed.pk))
        return assignment


def _move_deadline(assignment: Assignment, deadline: datetime | None) -> None:
    assignment.deadline = deadline
    if assignment.status == Assignment.Status.WAITING and assignment.rank_at != scheduling.HEAD_OF_LINE:
        assignment.rank_at = scheduling.place_in_line(assignment, now=timezone.now())
    assignment.save()


def reserve_planned(*, delivery_id: UUID, round: int) -> Assignment | None:
    """The timer of a later pickup fired: reserve a drone in time for it, or put it in line."""
    with atomic("drones"):
        assignment = _locked(delivery_id)
        if assignment is None or assignment.status != Assignment.Status.PLANNED or assignment.round != round:
            return _untouched(assignment)  # cancelled, rescheduled or re-planned since
        scheduling.reserve_planned(assignment)
        return assignment


def start_flight(*, delivery_id: UUID) -> Assignment | None:
    """The delivery is dispatched: take off (at the planned time for a later pickup)."""
    with atomic("drones"):
        assignment = _locked(delivery_id)
        if assignment is None:
            return None
        if assignment.status in (Assignment.Status.PLANNED, Assignment.Status.WAITING):
            # Its drone was grounded after the delivery had left: the next drone it gets flies at once.
            assignment.dispatched = True
            save_fields(assignment, ["dispatched", "updated_at"])
            _untouched(assignment)
        elif assignment.status == Assignment.Status.RESERVED:
            take_off(assignment, scheduling.locked_drone(assignment.drone_id))
        return assignment


def release_drone(*, delivery_id: UUID, reason: str) -> Assignment:
    """The delivery ended (completed, failed, cancelled): free its drone, which takes the next in line.

    Idempotent. A delivery that ended before it was scheduled leaves a released tombstone, so the
    late `delivery.requested` cannot reserve a drone for it; one still in line leaves the line.
    """
    with atomic("drones"):
        assignment, created = _locked(delivery_id), False
        if assignment is None:  # it ended before it was scheduled (or another release makes it meanwhile)
            assignment, created = Assignment.objects.select_for_update().get_or_create(
                delivery_id=delivery_id, defaults={"status": Assignment.Status.RELEASED, "reason": reason}
            )
        if created or assignment.status in (Assignment.Status.RELEASED, Assignment.Status.REFUSED):
            return assignment
        drone = None
        flying = assignment.drone_id is not None and assignment.status == Assignment.Status.FLYING
        if flying and reason != "delivered":
            # It failed with the drone at the drop-off (no confirmation came): the package goes back with it.
            publish(
                DronePackageReturned(delivery_id=delivery_id, drone_id=assignment.drone_id, reason=reason),
                stream=f"drone:{assignment.drone_id}",
                correlation_id=delivery_id,
            )
        if assignment.status == Assignment.Status.PLANNED:  # its reservation timer is moot: taken back
            withdraw_scheduled(stream=scheduling.reservation_timer_stream(delivery_id))
        if assignment.drone_id is not None and assignment.status in (
            Assignment.Status.RESERVED,
            Assignment.Status.FLYING,
        ):
            drone = scheduling.free(assignment, reason=reason)
        assignment.status, assignment.reason = Assignment.Status.RELEASED, reason
        save_fields(assignment, ["status", "reason", "updated_at"])
        if drone is not None:
            scheduling.find_work(drone)
        return assignment


def park_at_base(*, drone_id: UUID, mission: int) -> Drone | None:
    """A drone with nothing to do has flown home; from there it may reach deliveries it could not before."""
    with atomic("drones"):
        drone = Drone.objects.select_for_update().filter(pk=drone_id).first()
        if drone is None or drone.missions != mission or drone.status != Drone.Status.AVAILABLE:
            if drone is not None:  # it took another delivery (or was grounded) before it got home
                scheduling.find_work(drone, fly_home=False)  # a later return flight is on its way, if any
            return drone
        drone.latitude, drone.longitude = drone.home_latitude, drone.home_longitude
        save_fields(drone, ["latitude", "longitude", "updated_at"])
        scheduling.find_work(drone)
        return drone


# A fleet is placed a thousand drones to a statement; `seed_fleet` (the command) takes at most so many.
FLEET_BATCH, FLEET_MAX = 1000, 100_000


def seed_fleet(
    *,
    count: int,
    latitude: float,
    longitude: float,
    spread_km: float = 3.0,
    max_payload_kg: float = 10.0,
    range_km: float = 40.0,
    speed_kmh: float = 60.0,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, int]:
    """Place `count` drones around a base, named drone-001...; running it again adds none twice.

    All or nothing, in one transaction, a thousand drones to a statement (`progress(placed, count)`
    after each thousand). A new drone joins the fleet free: while deliveries wait, each takes the
    first in line it can fly.
    """
    created = 0
    with atomic("drones"):
        for start in range(0, count, FLEET_BATCH):
            batch = [
                _placed(i, count=count, latitude=latitude, longitude=longitude, spread_km=spread_km)
                for i in range(start, min(count, start + FLEET_BATCH))
            ]
            there = set(Drone.objects.filter(name__in=[name for name, _ in batch]).values_list("name", flat=True))
            new = [
                Drone(
                    id=uuid.uuid5(FLEET_NAMESPACE, name),
                    name=name,
                    max_payload_kg=max_payload_kg,
                    range_km=range_km,
                    speed_kmh=speed_kmh,
                    home_latitude=home.latitude,
                    home_longitude=home.longitude,
                    latitude=home.latitude,
                    longitude=home.longitude,
                )
                for name, home in batch
                if name not in there
            ]
            Drone.objects.bulk_create(new)
            created += len(new)
            if new and Assignment.objects.filter(status=Assignment.Status.WAITING).exists():
                for drone in Drone.objects.select_for_update().filter(pk__in=[d.pk for d in new]).order_by("name"):
                    scheduling.find_work(drone)
            if progress is not None:
                progress(start + len(batch), count)
    return created, count - created


def _placed(i: int, *, count: int, latitude: float, longitude: float, spread_km: float) -> tuple[str, Point]:
    """The i-th drone of a fleet of `count`: its name and its home, on rings around the base."""
    angle, ring = 2 * math.pi * i / max(count, 1), spread_km * (0.3 + 0.7 * ((i * 7) % 10) / 10)
    lat = latitude + (ring / 111.32) * math.sin(angle)
    lon = longitude + (ring / (111.32 * math.cos(math.radians(latitude)))) * math.cos(angle)
    return f"drone-{i + 1:03d}", Point(lat, lon)


class DroneBusy(Exception):
    """A drone in flight finishes its delivery first."""


def ground_drone(*, drone_id: UUID) -> Drone:
    """Take a drone out of service for maintenance.

    An idle drone is simply grounded; a reserved one that has not taken off gives its delivery
    back to the head of the line (or straight to another free drone); one in flight is refused.
    """
    with atomic("drones"):
        holding = Drone.objects.values_list("delivery_id", flat=True).get(pk=drone_id)
        assignment = _locked(holding) if holding else None  # the assignment first: start_flight's lock order
        drone = Drone.objects.select_for_update().get(pk=drone_id)
        if drone.status == Drone.Status.MAINTENANCE:
            return drone
        reserved = (
            drone.status == Drone.Status.RESERVED
            and assignment is not None
            and assignment.drone_id == drone.id
            and assignment.status == Assignment.Status.RESERVED
        )
        if drone.status != Drone.Status.AVAILABLE and not reserved:
            raise DroneBusy(f"{drone.name} is {drone.status} for delivery {drone.delivery_id}")
        drone.status, drone.delivery_id = Drone.Status.MAINTENANCE, None
        save_fields(drone, ["status", "delivery_id", "updated_at"])
        publish(DroneGrounded(drone_id=drone.id), stream=f"drone:{drone.id}")
        if reserved:
            assignment.drone, assignment.takeoff_at, assignment.eta = None, None, None
            scheduling.plan(assignment, head_of_line=True)
        else:
            _untouched(assignment)  # locked by a stale read of the drone's delivery
        return drone


def return_drone_to_service(*, drone_id: UUID) -> Drone:
    """Back from maintenance, free: it takes the first delivery in line it can fly."""
    with atomic("drones"):
        drone = Drone.objects.select_for_update().get(pk=drone_id)
        back = drone.status == Drone.Status.MAINTENANCE
        if back:
            drone.status = Drone.Status.AVAILABLE
            save_fields(drone, ["status", "updated_at"])
            publish(DroneReturnedToService(drone_id=drone.id), stream=f"drone:{drone.id}")
        # Also for one already in service (a second click): this transaction held a free drone's
        # row, which a delivery joining the line meanwhile skipped.
        scheduling.find_work(drone, fly_home=back)
        return drone


def check_fleet(*, generation: int) -> int:
    """The fleet check's timer fired: free drones are offered to the waiting line (drones.fleet_check)."""
    with atomic("drones"):
        return fleet_check.check(generation=generation, now=timezone.now(), find_work=scheduling.find_work)
