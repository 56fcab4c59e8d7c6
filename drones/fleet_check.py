"""The fleet check: while deliveries wait, every free drone is offered to the line again and again.

"No drone idle while a delivery it can fly waits" rests on one of two concurrent transactions
seeing the other's commit (see `matching.lock_the_waiting_line`). A transaction that locked a
free drone and then rolled back (a deadlock, a killed worker, the time limit, an IntegrityError)
commits nothing for the other to see: a delivery that skipped the locked drone meanwhile waits
while the drone is free again, until something else frees a drone. The fleet check repairs that:
a timer (`drone.fleet_check_due`) every DRONE_FLEET_CHECK_SECONDS, started by the first delivery
that joins the line and ending once the line is empty, hands every free drone to `find_work`.
"""

from collections.abc import Callable
from datetime import datetime, timedelta
from uuid import UUID, uuid5

from django.conf import settings

from drones.events import DroneFleetCheckDue
from drones.models import Assignment, Drone, FleetCheck
from outbox.api import publish

# Free drones offered per check: more come free only as deliveries end, which looks for work anyway.
DRONES_PER_CHECK = 200
# The namespace of the fleet check's timers' correlation ids, apart from any delivery's.
FLEET_CHECK_ID = UUID("3b8f5d0e-2c4a-4f7b-9d61-7a0c5e9b1f24")
# A chain whose timer is this many intervals late is taken for dead and replaced.
STALE_AFTER = 10


def keep_running(*, now: datetime) -> None:
    """A delivery joins the line: make sure a check is coming (one indexed read when it is).

    Called with the waiting line's lock held: the check's row is never waited for here (`check`
    holds it while it takes that lock), a locked row means a check is running and will go on.
    A chain counts as dead only when its timer is many intervals late (dead-lettered, or its
    queue lost), not merely delayed by a busy relay: a restart bumps the generation, and a chain
    restarted on every arrival would never get to run."""
    stale = now - STALE_AFTER * _interval()
    if FleetCheck.objects.filter(due_at__gt=stale).exists():
        return
    FleetCheck.objects.bulk_create([FleetCheck(id=1)], ignore_conflicts=True)
    check = FleetCheck.objects.select_for_update(skip_locked=True).filter(id=1).first()
    if check is None or (check.due_at is not None and check.due_at > stale):
        return  # a check is running, or started meanwhile
    check.generation += 1  # a chain that died is replaced, not doubled
    _schedule_next(check, now=now)


def check(*, generation: int, now: datetime, find_work: Callable[..., Assignment | None]) -> int:
    """The timer fired: offer the free drones to the line (each through `find_work`, the scheduler's
    own, given by the service so that this module and the scheduler do not import each other),
    then set the next timer while anyone waits. Returns how many waiting deliveries got a drone."""
    check = FleetCheck.objects.select_for_update().filter(id=1).first()
    if check is None or check.generation != generation:
        return 0  # an older chain's timer
    taken = 0
    if Assignment.objects.filter(status=Assignment.Status.WAITING).exists():
        free = Drone.objects.filter(status=Drone.Status.AVAILABLE, delivery_id__isnull=True).order_by("updated_at")
        for drone in free.select_for_update(skip_locked=True)[:DRONES_PER_CHECK]:
            taken += find_work(drone, fly_home=False) is not None
    if Assignment.objects.filter(status=Assignment.Status.WAITING).exists():
        _schedule_next(check, now=now)
    else:
        check.due_at = None  # the next delivery to wait starts it again
        check.save(update_fields=["due_at"])
    return taken


def _schedule_next(check: FleetCheck, *, now: datetime) -> None:
    check.due_at = now + _interval()
    check.save()
    publish(
        DroneFleetCheckDue(generation=check.generation),
        stream="fleet:check",
        # Each link a story of its own: a chain of timers is periodic work, not a causal loop, and
        # under one correlation id its hops would reach OUTBOX_MAX_HOPS (loop_detected) in minutes.
        correlation_id=uuid5(FLEET_CHECK_ID, f"{check.generation}:{check.due_at.isoformat()}"),
        available_at=check.due_at,
    )


def _interval() -> timedelta:
    return timedelta(seconds=settings.DRONE_FLEET_CHECK_SECONDS)
