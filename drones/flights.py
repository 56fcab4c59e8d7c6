"""Simulated flights: how long they take, and the position reports and arrival they schedule."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from drones.events import DroneArrived, DronePositionReported
from drones.geography import Point, route_km, waypoints
from drones.models import Assignment, Drone
from outbox.api import publish_many, save_fields


def flight_seconds(km: float, drone: Drone) -> float:
    """Wall-clock seconds the simulated drone needs for `km` (DRONE_SIMULATION_SPEEDUP times faster than real)."""
    return km / drone.speed_kmh * 3600 / settings.DRONE_SIMULATION_SPEEDUP


def take_off(assignment: Assignment, drone: Drone) -> None:
    """Fly from where the drone is to the pickup and the drop-off, leaving at the planned take-off time.

    The position reports and the arrival are published at once as delayed outbox rows, spaced by
    the simulated flight time, in one statement (`publish_many`); the flight has its own stream,
    numbered 1..n without other drone news.
    """
    pickup = Point(assignment.pickup_latitude, assignment.pickup_longitude)
    dropoff = Point(assignment.dropoff_latitude, assignment.dropoff_longitude)
    stops = [Point(drone.latitude, drone.longitude), pickup, dropoff]
    total = max(route_km(*stops), 1e-9)
    seconds = flight_seconds(total, drone)
    start = max(timezone.now(), assignment.takeoff_at or timezone.now())
    stream, delivery_id = f"flight:{assignment.delivery_id}", assignment.delivery_id
    reports = [
        (
            DronePositionReported(
                delivery_id=delivery_id,
                drone_id=drone.id,
                latitude=point.latitude,
                longitude=point.longitude,
                altitude=point.altitude,
            ),
            start + timedelta(seconds=seconds * travelled / total),
        )
        for travelled, point in waypoints(stops, settings.DRONE_POSITION_REPORTS)
    ]
    arrival = DroneArrived(
        delivery_id=delivery_id, drone_id=drone.id, latitude=dropoff.latitude, longitude=dropoff.longitude
    )
    schedule = [*reports, (arrival, start + timedelta(seconds=seconds))]
    publish_many(
        [event for event, _ in schedule],
        stream=stream,
        correlation_id=delivery_id,
        available_at=[at for _, at in schedule],
    )
    drone.status = Drone.Status.IN_FLIGHT
    save_fields(drone, ["status", "updated_at"])
    assignment.status, assignment.takeoff_at = Assignment.Status.FLYING, start
    assignment.eta = start + timedelta(seconds=seconds)
    save_fields(assignment, ["status", "takeoff_at", "eta", "updated_at"])
