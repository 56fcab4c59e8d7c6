"""Which drone for which delivery: indexed queries that lock what they choose.

Neither side is ever loaded whole. A drone for a delivery is looked for in growing boxes
around the pickup (an index on status and latitude), and only the drones in the box get an
exact distance; a delivery for a free drone is the first of the waiting line's index that the
drone can carry and reach. Both use `SELECT ... FOR UPDATE SKIP LOCKED`, so concurrent
schedulers never wait on, or take, a row another is deciding about.
"""

import math
from datetime import datetime

from django.db.models import F, FloatField, Q, QuerySet
from django.db.models.expressions import CombinedExpression, Value
from django.db.models.functions import Sqrt

from drones.geography import EARTH_RADIUS_KM, Point
from drones.models import WEIGHT_CLASSES, Assignment, Drone
from outbox.api import connection_of

connection = connection_of("drones")  # its database, wherever the settings put it

KM_PER_DEGREE = math.pi * EARTH_RADIUS_KM / 180
# Half-sides of the boxes searched around a pickup, nearest first; None is as far as any drone of
# the fleet could fly to a pickup (its range): no drone farther could take it.
SEARCH_KM = (1.0, 4.0, 16.0, 64.0, None)


def km_from(point: Point, latitude: str, longitude: str) -> CombinedExpression:
    """SQL for the distance from `point` to the coordinates in two columns.

    Equirectangular: exact to a fraction of a per cent at city distances, and plain arithmetic
    that PostgreSQL and SQLite both evaluate quickly.
    """
    north = (F(latitude) - Value(point.latitude)) * Value(KM_PER_DEGREE)
    east = (F(longitude) - Value(point.longitude)) * Value(KM_PER_DEGREE * math.cos(math.radians(point.latitude)))
    return Sqrt(north * north + east * east, output_field=FloatField())


def _box_half_sides(point: Point, km: float) -> tuple[float, float]:
    """Degrees of latitude and of longitude that `km` spans at `point`."""
    return km / KM_PER_DEGREE, km / (KM_PER_DEGREE * max(math.cos(math.radians(point.latitude)), 1e-6))


def _box(point: Point, km: float, latitude: str, longitude: str) -> Q:
    north, east = _box_half_sides(point, km)
    return Q(**{f"{latitude}__range": (point.latitude - north, point.latitude + north)}) & Q(
        **{f"{longitude}__range": (point.longitude - east, point.longitude + east)}
    )


def nearest_drone(
    assignment: Assignment, *, free: bool = True, lock: bool = True, maintenance: bool = False
) -> Drone | None:
    """The nearest drone able to fly the assignment: a free one, locked; or, for estimates, any in
    service (and with `maintenance`, any of the fleet)."""
    if free:
        # With the whole fleet busy (the common case for a delivery about to wait), one probe of the
        # free drones' index answers, instead of a search of every box.
        if not _probe(Drone, "status = %s AND max_payload_kg >= %s", [Drone.Status.AVAILABLE, assignment.weight_kg]):
            return None
        status = ("status = %s", [Drone.Status.AVAILABLE])
    else:
        status = ("status <> %s", [Drone.Status.MAINTENANCE]) if not maintenance else ("1 = 1", [])
    for km in SEARCH_KM:
        km = km if km is not None else max(_longest_range(), SEARCH_KM[-2])
        # The box is for the index; the circle inside it keeps out the box's corners, which may be
        # farther than a drone just outside the box. So the first found is surely the nearest, and
        # no row is locked that is not taken.
        drone = _nearest_in_box(assignment, km=km, status=status, lock=lock)
        if drone is not None:
            return drone
    return None


def _nearest_in_box(assignment: Assignment, *, km: float, status: tuple[str, list], lock: bool) -> Drone | None:
    """The nearest drone within `km` of the pickup, in the box around it, that can fly the assignment.

    Written as SQL, not built with the ORM: this is the scheduler's hottest query, run for a box
    after another, and Django spent three times as long building and compiling it as PostgreSQL
    did running it (docs/performance.md). The distances are `km_from`'s, term for term.
    """
    pickup = Point(assignment.pickup_latitude, assignment.pickup_longitude)
    dropoff = Point(assignment.dropoff_latitude, assignment.dropoff_longitude)
    approach, approach_params = _km_sql(pickup, "latitude", "longitude")
    home, home_params = _km_sql(dropoff, "home_latitude", "home_longitude")
    north, east = _box_half_sides(pickup, km)
    locking = " FOR UPDATE SKIP LOCKED" if lock and connection.features.has_select_for_update_skip_locked else ""
    sql = (
        f"SELECT *, {approach} AS approach_km FROM {connection.ops.quote_name(Drone._meta.db_table)} "
        f"WHERE max_payload_kg >= %s AND {status[0]} AND latitude BETWEEN %s AND %s AND longitude BETWEEN %s AND %s "
        f"AND {approach} <= %s AND range_km >= {approach} + %s + {home} "
        f"ORDER BY approach_km, name LIMIT 1{locking}"
    )
    params = [
        *approach_params,
        assignment.weight_kg,
        *status[1],
        pickup.latitude - north,
        pickup.latitude + north,
        pickup.longitude - east,
        pickup.longitude + east,
        *approach_params,
        km,
        *approach_params,
        assignment.trip_km,
        *home_params,
    ]
    return next(iter(Drone.objects.raw(sql, params)), None)


def _km_sql(point: Point, latitude: str, longitude: str) -> tuple[str, list[float]]:
    """`km_from` as SQL text and its parameters."""
    north, east = f"(({latitude} - %s) * %s)", f"(({longitude} - %s) * %s)"
    north_params = [point.latitude, KM_PER_DEGREE]
    east_params = [point.longitude, KM_PER_DEGREE * math.cos(math.radians(point.latitude))]
    return f"SQRT({north} * {north} + {east} * {east})", [*north_params, *north_params, *east_params, *east_params]


def _longest_range() -> float:
    """The longest range in the fleet (one probe of its index): no drone is farther from a pickup it could fly."""
    return Drone.objects.order_by("-range_km").values_list("range_km", flat=True).first() or 0.0


def reason_never_served(assignment: Assignment) -> str | None:
    """Why no drone of the fleet, in any state, could ever fly this from its home; None if one could.

    Only homes within the fleet's longest range of the pickup are looked at (an index on homes):
    the answer costs the same however large the fleet is elsewhere."""
    if not Drone.objects.filter(max_payload_kg__gte=assignment.weight_kg).exists():
        return "payload_exceeds_fleet"
    pickup = Point(assignment.pickup_latitude, assignment.pickup_longitude)
    dropoff = Point(assignment.dropoff_latitude, assignment.dropoff_longitude)
    from_home = (
        Drone.objects.filter(max_payload_kg__gte=assignment.weight_kg)
        .filter(_box(pickup, _longest_range(), "home_latitude", "home_longitude"))
        .annotate(approach_km=km_from(pickup, "home_latitude", "home_longitude"))
        .annotate(home_km=km_from(dropoff, "home_latitude", "home_longitude"))
        .filter(range_km__gte=F("approach_km") + Value(assignment.trip_km) + F("home_km"))
    )
    return None if from_home.exists() else "out_of_range"


def line_for(drone: Drone, *, now: datetime, lock: bool = True) -> QuerySet[Assignment]:
    """The waiting deliveries `drone` can carry and reach from where it is, in line order, locking what is read.

    Walks the waiting line's index in order and stops at the first match: the line's length
    matters only when the drone can serve none of those ahead.
    """
    position, home = Point(drone.latitude, drone.longitude), Point(drone.home_latitude, drone.home_longitude)
    line = (
        Assignment.objects.filter(status=Assignment.Status.WAITING, weight_kg__lte=drone.max_payload_kg)
        # Past its deadline it is the deliveries context's to fail, unless it has left already.
        .filter(Q(deadline__isnull=True) | Q(deadline__gt=now) | Q(dispatched=True))
        .annotate(approach_km=km_from(position, "pickup_latitude", "pickup_longitude"))
        .annotate(home_km=km_from(home, "dropoff_latitude", "dropoff_longitude"))
        .filter(trip_km__lte=Value(drone.range_km) - F("approach_km") - F("home_km"))
        .order_by("rank_at", "waiting_since", "delivery_id")
    )
    return line.select_for_update(skip_locked=True) if lock else line


def next_waiting_for(drone: Drone, *, now: datetime) -> Assignment | None:
    """The first delivery in line that `drone` can fly, locked; or None.

    A drone that cannot carry every weight class (a light one beside a line of heavy parcels)
    reads the head of each class it can carry, through the line's index by weight class, and
    locks the first of those heads; walking the whole line would read every parcel too heavy
    for it. Should another scheduler have taken that head meanwhile, the walk decides.
    """
    if not anyone_waiting():
        # Nobody waits (the common case below saturation): one probe of the waiting line's partial
        # index answers, instead of building, compiling and running the walk below (21 ms of a
        # worker's CPU, most of it Django's, for every drone that became free).
        return None
    carried = [n for n, low in enumerate((0.0, *WEIGHT_CLASSES)) if low < drone.max_payload_kg]
    if connection.vendor != "postgresql" or len(carried) > len(WEIGHT_CLASSES):
        return line_for(drone, now=now).first()
    line = line_for(drone, now=now, lock=False).values_list("rank_at", "waiting_since", "delivery_id")
    heads = [line.filter(weight_class=n)[:1] for n in carried]
    first = min(heads[0].union(*heads[1:], all=True), default=None) if heads else None
    if first is None:
        return None
    # Locked through the line's own conditions: PostgreSQL checks them again on the row it locks,
    # so a reschedule that committed since the read above (new places, a new deadline) cannot hand
    # this drone a delivery it can no longer reach in time.
    taken = line_for(drone, now=now).filter(delivery_id=first[2])
    return taken.first() or line_for(drone, now=now).first()


def anyone_waiting() -> bool:
    """Whether any delivery waits in line: one probe of the line's partial index."""
    return _probe(Assignment, "status = %s", [Assignment.Status.WAITING])


def _probe(model, where: str, params: list) -> bool:
    """`model.objects.filter(...).exists()` for the scheduler's probes, which every delivery and
    every drone that comes free runs (a free drone twice when nobody waits: before the line's lock
    and after). Written as SQL: Django built and compiled the query each time, which cost the
    worker more than the probe cost PostgreSQL (docs/performance.md)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {connection.ops.quote_name(model._meta.db_table)} WHERE {where} LIMIT 1", params)
        return cursor.fetchone() is not None


def lock_the_waiting_line() -> None:
    """Serialise the two ways to go idle: a drone finding no delivery, a delivery finding no drone.

    Each looks for the other first without this lock; only when it finds none does it take
    the lock and look again, so the last of two concurrent ones sees the other's commit (no
    drone is left free while a delivery it can serve waits). A transaction-scoped advisory
    lock on PostgreSQL; SQLite's writers are serialised already.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('drones.waiting_line'))")
