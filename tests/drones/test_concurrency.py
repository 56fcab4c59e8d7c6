"""Many schedulers at once on PostgreSQL READ COMMITTED: drones freed while requests arrive.

Each phase frees every busy drone and submits as many new requests in the same instant, from
several threads, so that "a drone finds no delivery" and "a delivery finds no drone" race.
After each phase: no drone holds two deliveries, no delivery two drones, and no free drone
could serve a delivery that waits.
"""

import random
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.utils import timezone

from drones import matching, services
from drones.geography import Point
from drones.models import Assignment, Drone
from tests.deliveries.conftest import BASE

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

FLEET, PHASES, THREADS = 8, 15, 8


def request(rng: random.Random) -> uuid.UUID:
    delivery_id = uuid.uuid4()

    def near() -> Point:
        return Point(BASE[0] + rng.uniform(-0.03, 0.03), BASE[1] + rng.uniform(-0.04, 0.04))

    services.schedule_drone(
        delivery_id=delivery_id,
        pickup=near(),
        dropoff=near(),
        weight_kg=rng.uniform(0.5, 3.0),
        priority=rng.choice(["normal", "normal", "high"]),
        pickup_time=timezone.now(),
    )
    return delivery_id


def all_at_once(jobs: list) -> None:
    start = threading.Barrier(len(jobs))

    def run(job):
        try:
            start.wait(timeout=30)
            job()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        for future in [pool.submit(run, job) for job in jobs]:
            future.result()


def problems() -> list[str]:
    found = []
    busy = list(Assignment.objects.filter(status__in=["reserved", "flying"]).values_list("delivery_id", "drone_id"))
    for drone_id, count in Counter(drone for _, drone in busy).items():
        if count > 1:
            found.append(f"drone {drone_id} holds {count} deliveries")
    held = dict(Drone.objects.exclude(delivery_id=None).values_list("id", "delivery_id"))
    for delivery_id, drone_id in busy:
        if held.get(drone_id) != delivery_id:
            found.append(f"{delivery_id} thinks it has drone {drone_id}, which holds {held.get(drone_id)}")
    for delivery_id, count in Counter(held.values()).items():
        if count > 1:
            found.append(f"delivery {delivery_id} holds {count} drones")
    for waiting in Assignment.objects.filter(status="waiting"):
        free = matching.nearest_drone(waiting, lock=False)
        if free is not None:
            found.append(f"{free.name} is free while {waiting.delivery_id}, which it can fly, waits")
    return found


def test_concurrent_releases_and_requests_never_double_assign_nor_leave_a_drone_idle(transactional_db):
    rng = random.Random(11)
    services.seed_fleet(count=FLEET, latitude=BASE[0], longitude=BASE[1])
    all_at_once([lambda: request(rng) for _ in range(FLEET + 4)])  # every drone busy, four in line
    assert problems() == []
    assert Assignment.objects.filter(status="waiting").count() == 4

    for _ in range(PHASES):
        busy = list(Assignment.objects.filter(status="reserved").values_list("delivery_id", flat=True))
        jobs = [lambda d=d: services.release_drone(delivery_id=d, reason="delivered") for d in busy]
        jobs += [lambda: request(rng) for _ in range(len(busy))]
        rng.shuffle(jobs)
        all_at_once(jobs)
        assert problems() == []
        assert Assignment.objects.filter(status="reserved").count() == FLEET  # the line is never empty

    while busy := list(Assignment.objects.filter(status="reserved").values_list("delivery_id", flat=True)):
        all_at_once([lambda d=d: services.release_drone(delivery_id=d, reason="delivered") for d in busy])
        assert problems() == []
    assert not Assignment.objects.filter(status="waiting").exists()
    assert Drone.objects.filter(status="available", delivery_id=None).count() == FLEET
