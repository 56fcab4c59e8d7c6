"""Whether a deadline can be met at all: no drone arrives before the fastest flight from the pickup
to the drop-off, so a deadline before that is a mistake to refuse, not a delivery to attempt.

The deliveries context decides this alone, at the API, from what the fleet promises in settings
(DELIVERY_FASTEST_DRONE_KMH, and DRONE_SIMULATION_SPEEDUP, which makes every flight that much
shorter): it does not ask the drones context, which it only hears from through events. The great-
circle distance is its own for the same reason: contexts share no code.
"""

import math
from datetime import datetime, timedelta

from django.conf import settings

EARTH_RADIUS_KM = 6371.0088


def _km(a: dict, b: dict) -> float:
    lat1, lat2 = math.radians(a["latitude"]), math.radians(b["latitude"])
    dlat, dlon = lat2 - lat1, math.radians(b["longitude"] - a["longitude"])
    h = math.sin(dlat / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin(dlon / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(math.sqrt(min(1.0, h)))


def fastest_flight(pickup: dict, dropoff: dict) -> timedelta:
    hours = _km(pickup, dropoff) / settings.DELIVERY_FASTEST_DRONE_KMH
    return timedelta(hours=hours / settings.DRONE_SIMULATION_SPEEDUP)


def unmeetable(*, deadline: datetime, pickup_time: datetime, pickup: dict, dropoff: dict) -> str | None:
    """Why no drone can meet `deadline`, naming the earliest it could; None when one can."""
    flight = fastest_flight(pickup, dropoff)
    earliest = pickup_time + flight
    if deadline >= earliest:
        return None
    when = earliest.isoformat(timespec="seconds").replace("+00:00", "Z")
    return f"deadline must be at or after {when}: the fastest flight from pickup to drop-off takes {_span(flight)}"


def _span(flight: timedelta) -> str:
    seconds = math.ceil(flight.total_seconds())
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min {seconds % 60} s"
