"""Scheduling cost against fleet and line size, measured (not asserted): `./dev test tests/bench -m benchmark -s`.

Each timed call runs in a transaction rolled back afterwards, so every call sees the same
fleet and the same line. Beside each figure, the same run times the scheduler this project
had before (every capable drone loaded into Python), as the reference.
"""

import math
import os
import random
import statistics
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from drones import matching, services
from drones.geography import Point, distance_km, route_km
from drones.models import Assignment, Drone
from tests.factories import BASE

pytestmark = pytest.mark.benchmark
RUNS, CALLS = int(os.environ.get("BENCH_RUNS", "5")), int(os.environ.get("BENCH_CALLS", "100"))


def place_fleet(count: int, *, radius_km: float, rng: random.Random, first: int = 0) -> None:
    """`count` drones spread evenly over a disk around the base, at home and free."""
    drones = []
    for i in range(count):
        r, angle = radius_km * math.sqrt(rng.random()), rng.uniform(0, 2 * math.pi)
        lat = BASE[0] + r * math.sin(angle) / 111.2
        lon = BASE[1] + r * math.cos(angle) / (111.2 * math.cos(math.radians(BASE[0])))
        drones.append(
            Drone(
                id=uuid.uuid4(),
                name=f"bench-{first + i:05d}",
                max_payload_kg=10,
                range_km=40,
                speed_kmh=60,
                home_latitude=lat,
                home_longitude=lon,
                latitude=lat,
                longitude=lon,
            )
        )
    Drone.objects.bulk_create(drones, batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE drones_drone; ANALYZE drones_assignment")


def a_trip(rng: random.Random) -> tuple[Point, Point]:
    def near() -> Point:
        return Point(BASE[0] + rng.uniform(-1, 1) * 3 / 111.2, BASE[1] + rng.uniform(-1, 1) * 3 / 74.9)

    return near(), near()


def the_old_scheduler(*, delivery_id, pickup: Point, dropoff: Point, weight_kg: float) -> Drone | None:
    """The reference: the scheduler before the waiting line, loading every capable drone."""
    with transaction.atomic():
        capable = list(Drone.objects.filter(max_payload_kg__gte=weight_kg))
        homes = {d.pk: Point(d.home_latitude, d.home_longitude) for d in capable}
        in_range = [d for d in capable if route_km(homes[d.pk], pickup, dropoff, homes[d.pk]) <= d.range_km]
        for drone in sorted(in_range, key=lambda d: (distance_km(homes[d.pk], pickup), d.name)):
            if drone.status == Drone.Status.AVAILABLE and Drone.objects.filter(
                pk=drone.pk, status=Drone.Status.AVAILABLE
            ).update(status=Drone.Status.RESERVED, delivery_id=delivery_id):
                return drone
    return None


def milliseconds_per_call(call, rng: random.Random) -> list[float]:
    """Median milliseconds per call, one figure per run; every call is rolled back."""
    medians = []
    for _ in range(RUNS):
        times = []
        for _ in range(CALLS):
            with transaction.atomic():
                began = time.perf_counter()
                call(rng)
                times.append((time.perf_counter() - began) * 1000)
                transaction.set_rollback(True)
        medians.append(statistics.median(times))
    return medians


def figures(label: str, medians: list[float], reference: float | None = None) -> str:
    ratio = f", {statistics.median(medians) / reference:.2f}x the 20-drone figure" if reference else ""
    return (
        f"{label}: median {statistics.median(medians):.2f} ms (runs: min {min(medians):.2f}, "
        f"max {max(medians):.2f}){ratio}"
    )


def schedule_new(rng: random.Random) -> None:
    pickup, dropoff = a_trip(rng)
    assignment = services.schedule_drone(
        delivery_id=uuid.uuid4(), pickup=pickup, dropoff=dropoff, weight_kg=2.0, pickup_time=timezone.now()
    )
    assert assignment.status == "reserved"


def schedule_old(rng: random.Random) -> None:
    pickup, dropoff = a_trip(rng)
    assert the_old_scheduler(delivery_id=uuid.uuid4(), pickup=pickup, dropoff=dropoff, weight_kg=2.0)


@pytest.mark.postgres
def test_scheduling_a_request_against_20_1000_and_10000_drones(transactional_db):
    rng, lines, reference = random.Random(3), [], {}
    for layout, radius in (("spread (constant density)", None), ("dense (all within 3 km)", 3.0)):
        placed = 0
        for fleet in (20, 1_000, 10_000):
            place_fleet(fleet - placed, radius_km=radius or 3.0 * math.sqrt(fleet / 20), rng=rng, first=placed)
            placed = fleet
            new = milliseconds_per_call(schedule_new, rng)
            old = milliseconds_per_call(schedule_old, rng)
            reference.setdefault((layout, "new"), statistics.median(new))
            reference.setdefault((layout, "old"), statistics.median(old))
            lines.append(figures(f"{layout}, {fleet:>6} drones, waiting line", new, reference[(layout, "new")]))
            lines.append(figures(f"{layout}, {fleet:>6} drones, old full scan", old, reference[(layout, "old")]))
        Drone.objects.all().delete()
    print("\n[bench] schedule_drone per request (PostgreSQL; rolled back):\n  " + "\n  ".join(lines))


def fill_line(count: int, rng: random.Random) -> None:
    now, line = timezone.now(), []
    for i in range(count):
        pickup, dropoff = a_trip(rng)
        since = now - timedelta(seconds=rng.uniform(0, 3600))
        line.append(
            Assignment(
                delivery_id=uuid.uuid4(),
                status=Assignment.Status.WAITING,
                priority="high" if i % 5 == 0 else "normal",
                pickup_latitude=pickup.latitude,
                pickup_longitude=pickup.longitude,
                dropoff_latitude=dropoff.latitude,
                dropoff_longitude=dropoff.longitude,
                trip_km=distance_km(pickup, dropoff),
                weight_kg=rng.uniform(0.5, 6),
                pickup_time=since,
                waiting_since=since,
                rank_at=services.scheduling.rank(
                    since=since, deadline=None, priority="high" if i % 5 == 0 else "normal"
                ),
            )
        )
    Assignment.objects.bulk_create(line, batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE drones_assignment")


@pytest.mark.postgres
def test_a_freed_drone_taking_the_next_in_line_with_10_and_10000_waiting(transactional_db):
    rng, lines = random.Random(5), []
    place_fleet(1, radius_km=1.0, rng=rng)
    drone_id, reference, filled = Drone.objects.get().pk, None, 0

    def take_next(_rng) -> None:
        drone = Drone.objects.select_for_update().get(pk=drone_id)
        assert services.scheduling.find_work(drone) is not None

    for waiting in (10, 10_000):
        fill_line(waiting - filled, rng)
        filled = waiting
        medians = milliseconds_per_call(take_next, rng)
        reference = reference or statistics.median(medians)
        lines.append(figures(f"{waiting:>6} waiting", medians, reference).replace("20-drone", "10-waiting"))
    with transaction.atomic():
        plan = matching.line_for(Drone.objects.get(pk=drone_id), now=timezone.now())[:1].explain()
    print("\n[bench] a freed drone takes the next in line (PostgreSQL; rolled back):\n  " + "\n  ".join(lines))
    print("  plan of the line's head:\n    " + plan.replace("\n", "\n    "))


def statements(call, rng: random.Random) -> int:
    """How many SQL statements one call runs (rolled back)."""
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        call(rng)
        transaction.set_rollback(True)
    return len(queries.captured_queries)


@pytest.mark.postgres
def test_the_worst_cases_a_wait_with_no_free_drone_and_a_freed_drone_that_fits_nobody_in_line(transactional_db):
    """The decisions whose cost could grow with the fleet or the line: a request that finds every
    drone busy and waits, behind 10 or 10,000; a freed drone that can carry none of 10 or 10,000
    waiting (a line of heavy parcels) and rests."""
    rng, lines, reference = random.Random(7), [], None

    def wait_in_line(rng) -> None:
        pickup, dropoff = a_trip(rng)
        assignment = services.schedule_drone(
            delivery_id=uuid.uuid4(), pickup=pickup, dropoff=dropoff, weight_kg=2.0, pickup_time=timezone.now()
        )
        assert assignment.status == "waiting"

    placed = filled = 0
    for fleet, waiting in ((20, 10), (1_000, 10), (10_000, 10), (10_000, 10_000)):
        place_fleet(fleet - placed, radius_km=3.0 * math.sqrt(fleet / 20), rng=rng, first=placed)
        placed = fleet
        Drone.objects.update(status=Drone.Status.RESERVED)  # the whole fleet busy
        busy = [d for d in Drone.objects.filter(assignments__isnull=True).values_list("pk", flat=True)[:2000]]
        Assignment.objects.bulk_create(
            [
                Assignment(delivery_id=uuid.uuid4(), drone_id=pk, status="reserved", weight_kg=1, eta=timezone.now())
                for pk in busy
            ],
            batch_size=2000,
        )
        fill_line(waiting - filled, rng)
        filled = waiting
        medians = milliseconds_per_call(wait_in_line, rng)
        reference = reference or statistics.median(medians)
        label = (
            f"wait, no free drone, {fleet:>6} drones, {waiting:>6} waiting ({statements(wait_in_line, rng)} statements)"
        )
        lines.append(figures(label, medians, reference).replace("20-drone", "first"))

    Assignment.objects.all().delete()
    Drone.objects.all().delete()
    place_fleet(1, radius_km=1.0, rng=rng)
    Drone.objects.update(max_payload_kg=2)  # a light drone
    drone_id, reference, filled = Drone.objects.get().pk, None, 0

    def rest(_rng) -> None:
        drone = Drone.objects.select_for_update().get(pk=drone_id)
        assert services.scheduling.find_work(drone) is None

    for waiting in (10, 10_000):
        fill_line(waiting - filled, rng)
        Assignment.objects.filter(status="waiting").update(weight_kg=9)  # heavy parcels only
        filled = waiting
        medians = milliseconds_per_call(rest, rng)
        reference = reference or statistics.median(medians)
        label = f"a freed 2 kg drone, {waiting:>6} heavy parcels waiting ({statements(rest, rng)} statements)"
        lines.append(figures(label, medians, reference).replace("20-drone", "first"))
    print("\n[bench] worst cases (PostgreSQL; rolled back):\n  " + "\n  ".join(lines))
