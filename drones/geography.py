"""Distances and routes on the Earth's surface, for choosing drones and simulating flights."""

import math
from dataclasses import dataclass

EARTH_RADIUS_KM = 6371.0088


@dataclass(frozen=True)
class Point:
    latitude: float
    longitude: float
    altitude: float = 0.0


def distance_km(a: Point, b: Point) -> float:
    """Great-circle (haversine) distance."""
    lat1, lat2 = math.radians(a.latitude), math.radians(b.latitude)
    dlat, dlon = lat2 - lat1, math.radians(b.longitude - a.longitude)
    h = math.sin(dlat / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin(dlon / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(math.sqrt(h))


def route_km(*stops: Point) -> float:
    return sum(distance_km(a, b) for a, b in zip(stops, stops[1:], strict=False))


def waypoints(stops: list[Point], count: int) -> list[tuple[float, Point]]:
    """`count` points evenly spaced along the route before its end, each with its distance from the
    start: the last is short of the destination, so a report is never due with the arrival."""
    legs = [(a, b, distance_km(a, b)) for a, b in zip(stops, stops[1:], strict=False)]
    total = sum(length for _, _, length in legs)
    points = []
    for i in range(1, count + 1):
        target = total * i / (count + 1)
        travelled = 0.0
        for a, b, length in legs:
            if travelled + length >= target or (a, b, length) == legs[-1]:
                f = 0.0 if length == 0 else min(1.0, (target - travelled) / length)
                points.append(
                    (
                        target,
                        Point(
                            a.latitude + (b.latitude - a.latitude) * f,
                            a.longitude + (b.longitude - a.longitude) * f,
                            a.altitude + (b.altitude - a.altitude) * f,
                        ),
                    )
                )
                break
            travelled += length
    return points
