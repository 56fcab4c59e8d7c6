"""What the console's fleet map draws: every drone where it is, coloured by what it is doing, the
flights in progress, and the deliveries waiting for a drone.

Compact rows (lists, not objects) from `values_list`, so the map of a 10,000-drone fleet is one
indexed read of the drones and two of the assignments, a few hundred kilobytes of JSON. A drone
in flight is placed along its trip from pickup to drop-off by the time since take-off (its row
holds where it last landed, until it lands again); one free away from home is flying home.
"""

from datetime import datetime

from django.conf import settings

from drones.models import Assignment, Drone

STATES = ("available", "reserved", "in_flight", "returning", "maintenance")


def fleet_map(*, now: datetime, limit: int | None = None) -> dict:
    """{"drones": [[id, name, state, latitude, longitude]], "flights": [[delivery, from, to]],
    "waiting": [[delivery, latitude, longitude, seconds waited]], "truncated": bool}."""
    limit = limit or settings.FLEET_MAP_MAX_DRONES
    flying = {
        drone_id: row
        for drone_id, *row in Assignment.objects.filter(status=Assignment.Status.FLYING).values_list(
            "drone_id",
            "delivery_id",
            "pickup_latitude",
            "pickup_longitude",
            "dropoff_latitude",
            "dropoff_longitude",
            "takeoff_at",
            "eta",
        )
    }
    columns = ("id", "name", "status", "latitude", "longitude", "home_latitude", "home_longitude")
    rows = list(Drone.objects.order_by("name").values_list(*columns)[: limit + 1])
    drones = [_drone(row, flying.get(row[0]), now) for row in rows[:limit]]
    flights = [
        [str(delivery), [plat, plon], [dlat, dlon]]
        for delivery, plat, plon, dlat, dlon, _, _ in flying.values()
        if None not in (plat, plon, dlat, dlon)
    ]
    waiting = [
        [str(delivery), lat, lon, max(0.0, (now - since).total_seconds()) if since else 0.0]
        for delivery, lat, lon, since in Assignment.objects.filter(status=Assignment.Status.WAITING)
        .order_by("waiting_since")
        .values_list("delivery_id", "pickup_latitude", "pickup_longitude", "waiting_since")[:limit]
        if lat is not None and lon is not None
    ]
    return {"drones": drones, "flights": flights, "waiting": waiting, "truncated": len(rows) > limit}


def _drone(row: tuple, flight: list | None, now: datetime) -> list:
    drone_id, name, status, lat, lon, home_lat, home_lon = row
    state = status
    if status == Drone.Status.IN_FLIGHT and flight is not None:
        lat, lon = _along(flight, now)
    elif status == Drone.Status.AVAILABLE and (lat, lon) != (home_lat, home_lon):
        state = "returning"
    return [str(drone_id), name, state, round(lat, 6), round(lon, 6)]


def _along(flight: list, now: datetime) -> tuple[float, float]:
    """Where a flight is now, between its pickup and its drop-off, by the time since take-off."""
    _, plat, plon, dlat, dlon, takeoff, eta = flight
    if None in (plat, plon, dlat, dlon):
        return plat or 0.0, plon or 0.0
    span = (eta - takeoff).total_seconds() if takeoff and eta else 0
    done = min(1.0, max(0.0, (now - takeoff).total_seconds() / span)) if span > 0 else 1.0
    return plat + (dlat - plat) * done, plon + (dlon - plon) * done
