"""Many schedulers at once on PostgreSQL READ COMMITTED: drones freed while requests arrive.

Each phase frees every busy drone and submits as many new requests in the same instant, from
several threads, so that "a drone finds no delivery" and "a delivery finds no drone" race.
After each phase: no drone holds two deliveries, no delivery two drones, and no free drone
could serve a delivery that waits.
"""

import contextlib
import random
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection
from django.utils import timezone

from drones import matching, scheduling, services
from drones.geography import Point
from drones.models import Assignment, Drone, FleetCheck
from tests.factories import BASE
from tests.waiting import wait_until

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


@pytest.mark.slow
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


def one_paused_while_another_runs(paused, pause_point, other) -> None:
    """Run `paused` in a thread until `pause_point` (holding its locks), run `other` meanwhile, then let it finish."""
    reached, go, errors = threading.Event(), threading.Event(), []
    pause_point(reached, go)

    def run(job, before=None, after=None):
        try:
            if before:
                assert before.wait(10), "the paused transaction never reached its pause point"
            job()
        except Exception as error:  # reported below, in the test's thread
            errors.append(error)
        finally:
            connection.close()
            if after:
                after.set()

    threads = [threading.Thread(target=run, args=(paused,)), threading.Thread(target=run, args=(other, reached, go))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []


def idle_drones_while_deliveries_wait() -> list[str]:
    return [p for p in problems() if "is free while" in p]


def test_a_waiting_row_held_by_the_dispatch_news_does_not_strand_a_drone_back_in_service(transactional_db, monkeypatch):
    services.seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    drone = Drone.objects.get()
    delivery_id = request(random.Random(1))
    services.ground_drone(drone_id=drone.pk)  # the delivery goes back in line, at its head

    def pause_after_marking_dispatched(reached, go):
        save_fields = services.save_fields

        def save_then_pause(instance, fields, **kwargs):
            save_fields(instance, fields, **kwargs)
            if isinstance(instance, Assignment) and list(fields) == ["dispatched", "updated_at"]:
                reached.set()
                go.wait(10)

        monkeypatch.setattr(services, "save_fields", save_then_pause)

    one_paused_while_another_runs(
        lambda: services.start_flight(delivery_id=delivery_id),
        pause_after_marking_dispatched,
        lambda: services.return_drone_to_service(drone_id=drone.pk),  # finds the line's only row locked
    )

    assert idle_drones_while_deliveries_wait() == []
    assert Assignment.objects.get(delivery_id=delivery_id).status == "flying"


def test_a_planning_timer_putting_its_drone_off_does_not_hide_it_from_a_new_request(
    transactional_db, monkeypatch, settings
):
    settings.DRONE_PICKUP_MARGIN_SECONDS = 60
    services.seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    planned = uuid.uuid4()
    services.schedule_drone(
        delivery_id=planned,
        pickup=Point(BASE[0] + 0.01, BASE[1]),
        dropoff=Point(BASE[0] - 0.01, BASE[1]),
        weight_kg=1.0,
        pickup_time=timezone.now() + timedelta(minutes=30),
    )
    assert Assignment.objects.get(delivery_id=planned).status == "planned"

    def pause_after_putting_off(reached, go):
        plan_reservation = scheduling._plan_reservation

        def then_pause(assignment, reserve_at):
            plan_reservation(assignment, reserve_at)
            reached.set()
            go.wait(10)

        monkeypatch.setattr(scheduling, "_plan_reservation", then_pause)

    one_paused_while_another_runs(
        lambda: services.reserve_planned(delivery_id=planned, round=1),  # fired early: puts itself off
        pause_after_putting_off,
        lambda: request(random.Random(2)),
    )

    assert idle_drones_while_deliveries_wait() == []
    assert Assignment.objects.filter(status="reserved").count() == 1


class RolledBack(Exception):
    """Stands for what undoes a transaction after it locked a drone: a deadlock, a killed worker."""


def test_a_drone_locked_by_a_transaction_that_rolls_back_is_found_by_the_fleet_check(transactional_db, monkeypatch):
    services.seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    drone, a, b = Drone.objects.get(), uuid.uuid4(), uuid.uuid4()

    def pause_after_locking_then_fail(reached, go):
        reserve = scheduling.reserve

        def reserve_then_roll_back(drone, assignment, *, now):
            reserve(drone, assignment, now=now)
            reached.set()
            go.wait(10)
            raise RolledBack

        monkeypatch.setattr(scheduling, "reserve", reserve_then_roll_back)

    def schedule(delivery_id):
        services.schedule_drone(
            delivery_id=delivery_id,
            pickup=Point(BASE[0] + 0.01, BASE[1]),
            dropoff=Point(BASE[0] - 0.01, BASE[1]),
            weight_kg=1.0,
        )

    def schedule_a_and_fail():
        with contextlib.suppress(RolledBack):
            schedule(a)

    def schedule_b():
        monkeypatch.undo()  # only the paused transaction fails
        schedule(b)

    one_paused_while_another_runs(schedule_a_and_fail, pause_after_locking_then_fail, schedule_b)

    # B skipped the locked drone, took the line's lock, skipped it again and waits; A rolled back.
    assert Assignment.objects.get(delivery_id=b).status == "waiting"
    assert not Assignment.objects.filter(delivery_id=a).exists()
    assert idle_drones_while_deliveries_wait() == [f"{drone.name} is free while {b}, which it can fly, waits"]

    check = FleetCheck.objects.get()  # B's wait started the fleet check's timer
    services.check_fleet(generation=check.generation)

    assert idle_drones_while_deliveries_wait() == []
    assert Assignment.objects.get(delivery_id=b).drone_id == drone.pk


def test_a_new_assignment_never_overwrites_a_tombstone_committed_after_it_looked(transactional_db, monkeypatch):
    services.seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    delivery_id, errors = uuid.uuid4(), []

    def pause_after_finding_no_assignment(reached, go):
        locked = services._locked

        def locked_then_pause(delivery_id):
            found = locked(delivery_id)
            reached.set()
            go.wait(10)
            return found

        monkeypatch.setattr(services, "_locked", locked_then_pause)

    def requested():  # delivery.requested, handled while delivery.cancelled is handled too
        try:
            services.schedule_drone(
                delivery_id=delivery_id, pickup=Point(*BASE), dropoff=Point(BASE[0] - 0.01, BASE[1]), weight_kg=1.0
            )
        except IntegrityError as error:  # its handler is retried, and then finds the tombstone
            errors.append(error)

    def cancelled():
        monkeypatch.undo()
        services.release_drone(delivery_id=delivery_id, reason="delivery_cancelled")

    one_paused_while_another_runs(requested, pause_after_finding_no_assignment, cancelled)

    assert Assignment.objects.get(delivery_id=delivery_id).status == "released"  # the tombstone holds
    assert Drone.objects.get().status == "available"
    assert len(errors) == 1  # a conflict on insert, not an UPDATE of the tombstone (one statement, not two)


def waiting_on_an_advisory_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return cursor.fetchone()[0] > 0


def test_the_two_ways_of_going_idle_are_serialised_by_the_waiting_lines_lock(transactional_db, monkeypatch):
    """The interleaving that strands a drone without the lock, forced every time: the drone going idle
    has looked twice and found no delivery; the delivery then looks for a drone, which is still locked."""
    services.seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    first, second = uuid.uuid4(), uuid.uuid4()
    here = Point(BASE[0] + 0.01, BASE[1])
    services.schedule_drone(delivery_id=first, pickup=here, dropoff=Point(BASE[0] - 0.01, BASE[1]), weight_kg=1.0)
    looked_twice, go, requested, errors = threading.Event(), threading.Event(), threading.Event(), []
    next_waiting_for, looks = matching.next_waiting_for, []

    def pausing_after_the_second_look(drone, *, now):
        found = next_waiting_for(drone, now=now)
        looks.append(found)
        if threading.current_thread().name == "going-idle" and len(looks) == 2:
            looked_twice.set()
            go.wait(20)  # holding the drone's row and the line's lock, not yet committed
        return found

    monkeypatch.setattr(matching, "next_waiting_for", pausing_after_the_second_look)

    def run(job, done=None):
        try:
            job()
        except Exception as error:
            errors.append(error)
        finally:
            connection.close()
            if done:
                done.set()

    idle = threading.Thread(
        target=run, name="going-idle", args=(lambda: services.release_drone(delivery_id=first, reason="delivered"),)
    )
    request = threading.Thread(
        target=run,
        args=(lambda: services.schedule_drone(delivery_id=second, pickup=here, dropoff=here, weight_kg=1.0), requested),
    )
    idle.start()
    try:
        assert looked_twice.wait(20)
        request.start()
        # The request either finishes (no lock: it found the drone locked, twice, and queued itself)
        # or waits for the line's lock until the drone's transaction commits.
        wait_until(lambda: requested.is_set() or waiting_on_an_advisory_lock(), what="the request to decide or wait")
    finally:
        go.set()
        idle.join(30)
        request.join(30)
    assert errors == []

    assert idle_drones_while_deliveries_wait() == []
    assert Assignment.objects.get(delivery_id=second).status == "reserved"


def test_a_freed_drone_never_takes_a_delivery_rescheduled_out_of_its_reach(transactional_db, monkeypatch):
    """A freed drone read the head of the waiting line unlocked, then locked it by its
    delivery alone; a reschedule committing in between (new places, out of its range) was taken."""

    def in_maintenance(name: str, range_km: float) -> Drone:
        return Drone.objects.create(
            id=uuid.uuid4(),
            name=name,
            status=Drone.Status.MAINTENANCE,
            max_payload_kg=10.0,
            range_km=range_km,
            speed_kmh=60.0,
            home_latitude=BASE[0],
            home_longitude=BASE[1],
            latitude=BASE[0],
            longitude=BASE[1],
        )

    short, _ = in_maintenance("short-range", 20.0), in_maintenance("long-range", 200.0)  # the fleet can fly both
    delivery_id, pickup, near, far = (
        uuid.uuid4(),
        Point(*BASE),
        Point(BASE[0] - 0.02, BASE[1]),
        Point(BASE[0] + 0.5, BASE[1]),
    )
    services.schedule_drone(delivery_id=delivery_id, pickup=pickup, dropoff=near, weight_kg=1.0)
    assert Assignment.objects.get(delivery_id=delivery_id).status == "waiting"  # every drone in maintenance

    def reschedule_out_of_its_reach() -> None:  # 55 km north: out of the short-range drone's 20 km
        try:
            services.reschedule_drone(delivery_id=delivery_id, round=2, pickup=pickup, dropoff=far, weight_kg=1.0)
        finally:
            connection.close()

    rescheduled = []

    def head_then_a_reschedule_commits(*args, **kwargs):  # right after the unlocked read of the line's heads
        head = min(*args, **kwargs)
        if not rescheduled:
            rescheduled.append(threading.Thread(target=reschedule_out_of_its_reach))
            rescheduled[0].start()
            rescheduled[0].join(30)
        return head

    monkeypatch.setattr(matching, "min", head_then_a_reschedule_commits, raising=False)
    services.return_drone_to_service(drone_id=short.pk)  # back from maintenance: it looks for work

    assert rescheduled and not rescheduled[0].is_alive()
    waiting = Assignment.objects.get(delivery_id=delivery_id)
    assert (waiting.round, waiting.status, waiting.drone_id) == (2, "waiting", None)
    assert Drone.objects.get(pk=short.pk).status == "available"
