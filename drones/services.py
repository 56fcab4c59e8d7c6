"""Drone scheduler use cases: each one transaction, its events inside it."""

import math
import uuid
from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from drones.events import (
    DroneArrived,
    DroneGrounded,
    DronePositionReported,
    DroneReleased,
    DroneReturnedToService,
    DroneScheduled,
    DroneUnavailable,
)
from drones.geography import Point, distance_km, route_km, waypoints
from drones.models import Assignment, Drone
from outbox.publishing import publish

FLEET_NAMESPACE = uuid.UUID("6f1c9f5e-4a35-4c1e-9a53-0d2a3c1b8e77")


def _home(drone: Drone) -> Point:
    return Point(drone.home_latitude, drone.home_longitude)


def _flight_seconds(km: float, drone: Drone) -> float:
    return km / drone.speed_kmh * 3600 / settings.DRONE_SIMULATION_SPEEDUP


def schedule_drone(
    *, delivery_id: UUID, pickup: Point, dropoff: Point, weight_kg: float, priority: str = "normal"
) -> Assignment:
    """Reserve the nearest available drone that can carry the weight there and back, or say why none can."""
    with transaction.atomic():
        existing = Assignment.objects.select_for_update().filter(delivery_id=delivery_id).first()
        if existing is not None:  # handled before, rescheduled first, or the delivery already ended (tombstone)
            return existing
        return _schedule(
            delivery_id=delivery_id, pickup=pickup, dropoff=dropoff, weight_kg=weight_kg, priority=priority, round=1
        )


def reschedule_drone(
    *, delivery_id: UUID, round: int, pickup: Point, dropoff: Point, weight_kg: float, priority: str = "normal"
) -> Assignment | None:
    """The customer moved pickup or drop-off before dispatch: release the drone, then schedule again."""
    with transaction.atomic():
        existing = Assignment.objects.select_for_update().filter(delivery_id=delivery_id).first()
        if existing is not None:
            if existing.round >= round or existing.status not in (
                Assignment.Status.RESERVED,
                Assignment.Status.REFUSED,
            ):
                return existing  # seen already, or the delivery ended or took off meanwhile
            if existing.status == Assignment.Status.RESERVED:
                _free_drone(existing, reason="rescheduled")
            existing.delete()
        return _schedule(
            delivery_id=delivery_id, pickup=pickup, dropoff=dropoff, weight_kg=weight_kg, priority=priority, round=round
        )


def _schedule(
    *, delivery_id: UUID, pickup: Point, dropoff: Point, weight_kg: float, priority: str, round: int
) -> Assignment:
    drone, reason = _reserve_nearest(delivery_id=delivery_id, pickup=pickup, dropoff=dropoff, weight_kg=weight_kg)
    assignment = Assignment(
        delivery_id=delivery_id,
        drone=drone,
        priority=priority,
        round=round,
        pickup_latitude=pickup.latitude,
        pickup_longitude=pickup.longitude,
        dropoff_latitude=dropoff.latitude,
        dropoff_longitude=dropoff.longitude,
    )
    if drone is None:
        assignment.status, assignment.reason = Assignment.Status.REFUSED, reason
        assignment.save()
        publish(
            DroneUnavailable(delivery_id=delivery_id, reason=reason, round=round), stream=f"assignment:{delivery_id}"
        )
        return assignment
    flight = route_km(_home(drone), pickup, dropoff)
    assignment.status = Assignment.Status.RESERVED
    assignment.eta = timezone.now() + timedelta(seconds=_flight_seconds(flight, drone))
    assignment.save()
    publish(
        DroneScheduled(delivery_id=delivery_id, drone_id=drone.id, eta=assignment.eta, round=round),
        stream=f"drone:{drone.id}",
    )
    return assignment


def _reserve_nearest(*, delivery_id: UUID, pickup: Point, dropoff: Point, weight_kg: float) -> tuple[Drone | None, str]:
    capable = [d for d in Drone.objects.filter(max_payload_kg__gte=weight_kg)]
    if not capable:
        return None, "payload_exceeds_fleet"
    in_range = [d for d in capable if route_km(_home(d), pickup, dropoff, _home(d)) <= d.range_km]
    if not in_range:
        return None, "out_of_range"
    for drone in sorted(in_range, key=lambda d: (distance_km(_home(d), pickup), d.name)):
        if drone.status != Drone.Status.AVAILABLE:
            continue
        # A conditional UPDATE locks the row and re-checks the status after any concurrent
        # reservation commits: two deliveries can never both win one drone, and no lock is
        # held on the drones we lose, so concurrent schedulers cannot deadlock.
        won = Drone.objects.filter(pk=drone.pk, status=Drone.Status.AVAILABLE).update(
            status=Drone.Status.RESERVED, delivery_id=delivery_id, updated_at=timezone.now()
        )
        if won:
            drone.refresh_from_db()
            return drone, ""
    return None, "no_drone_available"


def start_flight(*, delivery_id: UUID) -> Assignment | None:
    """Take off: schedule the flight's position reports and arrival as delayed events."""
    with transaction.atomic():
        assignment = Assignment.objects.select_for_update().filter(delivery_id=delivery_id).first()
        if assignment is None or assignment.status != Assignment.Status.RESERVED:
            return assignment
        drone = Drone.objects.select_for_update().get(pk=assignment.drone_id)
        pickup = Point(assignment.pickup_latitude, assignment.pickup_longitude)
        dropoff = Point(assignment.dropoff_latitude, assignment.dropoff_longitude)
        stops = [_home(drone), pickup, dropoff]
        total = max(route_km(*stops), 1e-9)
        seconds = _flight_seconds(total, drone)
        # The flight has its own stream, so its reports are numbered 1..n without other drone news between.
        now, stream = timezone.now(), f"flight:{delivery_id}"
        for travelled, point in waypoints(stops, settings.DRONE_POSITION_REPORTS):
            publish(
                DronePositionReported(
                    delivery_id=delivery_id,
                    drone_id=drone.id,
                    latitude=point.latitude,
                    longitude=point.longitude,
                    altitude=point.altitude,
                ),
                stream=stream,
                available_at=now + timedelta(seconds=seconds * travelled / total),
            )
        publish(
            DroneArrived(
                delivery_id=delivery_id, drone_id=drone.id, latitude=dropoff.latitude, longitude=dropoff.longitude
            ),
            stream=stream,
            available_at=now + timedelta(seconds=seconds),
        )
        drone.status = Drone.Status.IN_FLIGHT
        drone.save(update_fields=["status", "updated_at"])
        assignment.status = Assignment.Status.FLYING
        assignment.save(update_fields=["status", "updated_at"])
        return assignment


def release_drone(*, delivery_id: UUID, reason: str) -> Assignment:
    """Free the delivery's drone (end of flight or compensation); idempotent.

    A delivery that ended before it was scheduled leaves a released tombstone, so the late
    `delivery.requested` cannot reserve a drone for it.
    """
    with transaction.atomic():
        assignment, created = Assignment.objects.select_for_update().get_or_create(
            delivery_id=delivery_id, defaults={"status": Assignment.Status.RELEASED, "reason": reason}
        )
        if created or assignment.status in (Assignment.Status.RELEASED, Assignment.Status.REFUSED):
            return assignment
        _free_drone(assignment, reason=reason)
        assignment.status, assignment.reason = Assignment.Status.RELEASED, reason
        assignment.save(update_fields=["status", "reason", "updated_at"])
        return assignment


def _free_drone(assignment: Assignment, *, reason: str) -> None:
    """Give the assignment's drone back to the fleet and say so (`drone.released`)."""
    drone = Drone.objects.select_for_update().get(pk=assignment.drone_id)
    if drone.delivery_id == assignment.delivery_id:
        drone.delivery_id = None
        if drone.status != Drone.Status.MAINTENANCE:
            drone.status = Drone.Status.AVAILABLE
        drone.save(update_fields=["status", "delivery_id", "updated_at"])
    publish(
        DroneReleased(delivery_id=assignment.delivery_id, drone_id=drone.id, reason=reason), stream=f"drone:{drone.id}"
    )


def seed_fleet(
    *,
    count: int,
    latitude: float,
    longitude: float,
    spread_km: float = 3.0,
    max_payload_kg: float = 10.0,
    range_km: float = 40.0,
    speed_kmh: float = 60.0,
) -> tuple[int, int]:
    """Place `count` drones around a base, named drone-001...; running it again adds none twice."""
    created = 0
    for i in range(count):
        name = f"drone-{i + 1:03d}"
        angle, ring = 2 * math.pi * i / max(count, 1), spread_km * (0.3 + 0.7 * ((i * 7) % 10) / 10)
        lat = latitude + (ring / 111.32) * math.sin(angle)
        lon = longitude + (ring / (111.32 * math.cos(math.radians(latitude)))) * math.cos(angle)
        _, was_created = Drone.objects.get_or_create(
            name=name,
            defaults={
                "id": uuid.uuid5(FLEET_NAMESPACE, name),
                "max_payload_kg": max_payload_kg,
                "range_km": range_km,
                "speed_kmh": speed_kmh,
                "home_latitude": lat,
                "home_longitude": lon,
            },
        )
        created += was_created
    return created, count - created


class DroneBusy(Exception):
    """Only an idle drone can be grounded; one that is reserved or flying finishes first."""


def ground_drone(*, drone_id: UUID) -> Drone:
    """Take an idle drone out of service for maintenance."""
    with transaction.atomic():
        drone = Drone.objects.select_for_update().get(pk=drone_id)
        if drone.status == Drone.Status.MAINTENANCE:
            return drone
        if drone.status != Drone.Status.AVAILABLE:
            raise DroneBusy(f"{drone.name} is {drone.status} for delivery {drone.delivery_id}")
        drone.status = Drone.Status.MAINTENANCE
        drone.save(update_fields=["status", "updated_at"])
        publish(DroneGrounded(drone_id=drone.id), stream=f"drone:{drone.id}")
        return drone


def return_drone_to_service(*, drone_id: UUID) -> Drone:
    with transaction.atomic():
        drone = Drone.objects.select_for_update().get(pk=drone_id)
        if drone.status == Drone.Status.MAINTENANCE:
            drone.status = Drone.Status.AVAILABLE
            drone.save(update_fields=["status", "updated_at"])
            publish(DroneReturnedToService(drone_id=drone.id), stream=f"drone:{drone.id}")
        return drone
